import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_mha.py"


def test_benchmark_runs_and_prints_ratios_for_every_implementation(capsys):
    spec = importlib.util.spec_from_file_location("bench_mha", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    results = bench.main(["--batch", "2", "--tokens", "16", "--dim", "24", "--heads", "3", "--repeats", "1"])
    out = capsys.readouterr().out
    assert set(results) == {"forward", "forward+backward"}
    for timings in results.values():
        assert len(timings) == 5 and all(t > 0 for t in timings.values())
        for name in timings:
            assert name in out
    assert "/ minimal" in out and "/ nn.MHA" in out and "/ book" in out
