import importlib.util
import json
from pathlib import Path

import pytest
import torch

from attention_helpers._ram import PeakRAM

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPT = BENCHMARKS / "bench_mha.py"
GENERATE_SCRIPT = BENCHMARKS / "bench_generate.py"


def load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmark_runs_and_prints_ratios_for_every_implementation(capsys):
    bench = load(SCRIPT)
    results = bench.main(["--batch", "2", "--tokens", "16", "--dim", "24", "--heads", "3", "--repeats", "1"])
    out = capsys.readouterr().out
    assert set(results) == {"forward", "forward+backward"}
    for timings in results.values():
        assert len(timings) == 5 and all(t > 0 for t in timings.values())
        for name in timings:
            assert name in out
    assert "/ minimal" in out and "/ nn.MHA" in out and "/ book" in out


@pytest.mark.slow
def test_memory_benchmark_measures_each_implementation_in_a_fresh_process(capsys, tmp_path):
    bench = load(BENCHMARKS / "bench_attention_ram.py")
    output = tmp_path / "attention_ram.json"
    num_tokens = 600
    results = bench.main(["--tokens", str(num_tokens), "--repeats", "1", "--output", str(output)])
    out = capsys.readouterr().out
    assert [row["implementation"] for row in results] == ["explicit", "tiled", "fused"]
    assert all(row["wall_s"] > 0 and row["cpu_s"] >= 0 for row in results)
    # the explicit path stores the scores and the weights: at least one float32 (600, 600) matrix must show
    assert results[0]["extra_peak_mib"] >= num_tokens**2 * 4 / 2**20
    assert json.loads(output.read_text())["results"] == results
    assert "/ fused" in out and "extra peak MiB" in out


def test_memory_benchmark_peak_method_sees_a_freed_allocation():
    """The method itself: a 64 MiB tensor allocated and freed after the reset shows in the high-water mark."""
    peak = PeakRAM()  # what the memory benchmark and lesson 13's ring attention measure with
    if not peak.exact:
        pytest.skip("/proc/self/clear_refs cannot be written here; the benchmark falls back to ru_maxrss")
    block = torch.ones(16 * 2**20)  # 64 MiB of float32, every page written
    del block
    assert 60 < peak.extra_mib() < 80  # give or take pages the allocator already held


def test_generation_benchmark_runs_and_prints_the_cache_speed_up(capsys):
    bench = load(GENERATE_SCRIPT)
    args = ["--prompt-tokens", "4", "--new-tokens", "8", "--dim", "16", "--heads", "2", "--layers", "1"]
    results = bench.main([*args, "--batch", "1", "3", "--repeats", "1"])
    out = capsys.readouterr().out
    assert set(results) == {1, 3}
    for timings in results.values():
        assert len(timings) == 5 and all(seconds > 0 for seconds in timings.values())
        assert f"speed-up of the cache (uncached / cached): {timings['speed-up']:.1f}x" in out
        assert f"package's cached / minimal cached: {timings['cached / minimal']:.2f}x" in out
    assert "batch 1:" in out and "batch 3:" in out and "uncached" in out and "cached (KV cache)" in out
