"""Install a custom.css where this venv's Jupyter server looks for one (make lab starts JupyterLab with
--LabApp.custom_css=True): jupyter_server/static/custom/custom.css. A learner's own ~/.jupyter/custom/custom.css
is searched first and wins.

    python tools/install_lab_css.py tools/jupyterlab_custom.css
"""

import shutil
import sys
from pathlib import Path

import jupyter_server


def main() -> None:
    target = Path(jupyter_server.__file__).parent / "static" / "custom" / "custom.css"
    target.parent.mkdir(exist_ok=True)
    shutil.copyfile(sys.argv[1], target)


if __name__ == "__main__":
    main()
