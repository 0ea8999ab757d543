"""Figures, diagrams and widgets for the notebooks: the part of the package that needs Matplotlib, IPython
and ipywidgets.

Importing this subpackage is light: a submodule, and Matplotlib or ipywidgets with it, is imported the first
time one of its names is used. ``attention_helpers`` re-exports every name in ``__all__`` the same way, so a
notebook calls ``ah.plot_attention(...)``.
"""

import importlib

# In the order their imports flow (widgets uses plotting; pretrained uses plotting and widgets), so the first
# submodule that holds a name is the one that defines it, and a plotting name never imports ipywidgets.
_SUBMODULES = ("plotting", "training", "widgets", "pretrained", "tiling", "alignment")

__all__ = [
    "diagram_path",
    "dropout_widget",
    "heads_widget",
    "layer_head_widget",
    "plot_attention",
    "plot_attention_cost",
    "plot_attention_heads",
    "plot_attention_layers",
    "plot_attention_received",
    "plot_attention_steps",
    "plot_causal_blocks",
    "plot_context_vector",
    "plot_cross_attention",
    "plot_cross_attention_heads",
    "plot_dot_product_2d",
    "plot_dot_product_panels",
    "plot_dropout",
    "plot_dropout_average",
    "plot_embeddings_3d",
    "plot_exact_match",
    "plot_field_shares",
    "plot_heads_side_by_side",
    "plot_history",
    "plot_layer_head",
    "plot_positional_encoding",
    "plot_query_and_keys_2d",
    "plot_scaling",
    "plot_score_gradients",
    "plot_scores",
    "plot_similarities",
    "plot_temperatures",
    "query_scores_widget",
    "rotate_embeddings_widget",
    "scaling_widget",
    "show_diagram",
    "temperature_widget",
]


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in __all__:
        for submodule in _SUBMODULES:
            namespace = vars(importlib.import_module(f".{submodule}", __name__))
            if name in namespace:
                globals()[name] = namespace[name]  # later look-ups skip __getattr__
                return namespace[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
