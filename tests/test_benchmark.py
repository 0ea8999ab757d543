import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_mha.py"
GENERATE_SCRIPT = SCRIPT.with_name("bench_generate.py")


def _load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    assert "/ minimal" in out and "/ nn.MHA" in out and "/ seed 001" in out


def test_generation_benchmark_runs_and_prints_the_cache_speed_up(capsys):
    bench = _load(GENERATE_SCRIPT)
    args = ["--prompt-tokens", "4", "--new-tokens", "8", "--dim", "16", "--heads", "2", "--layers", "1"]
    results = bench.main([*args, "--batch", "1", "3", "--repeats", "1"])
    out = capsys.readouterr().out
    assert set(results) == {1, 3}
    for timings in results.values():
        assert len(timings) == 3 and all(seconds > 0 for seconds in timings.values())
        assert f"speed-up of the cache (uncached / cached): {timings['speed-up']:.1f}x" in out
    assert "batch 1:" in out and "batch 3:" in out and "uncached" in out and "cached (KV cache)" in out
