"""Issue 18: the Gantt chart is readable in JupyterLab's dark theme (a dark picture next to
the light one; the theme shows one of them), never a white box."""

from __future__ import annotations

import io
from typing import Any

import pytest

from chainlab.timeline import TimelineFigure
from chainlab.timeline.plot import DARK_BG

from .render.scenarios import Lab, run_saga

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def corner(png: bytes) -> tuple[int, ...]:
    from PIL import Image

    return tuple(Image.open(io.BytesIO(png)).convert("RGB").getpixel((2, 2)))


async def test_the_chart_carries_a_dark_picture_the_dark_theme_shows(tmp_path: Any) -> None:
    fig = (await run_saga(Lab())).plot_timeline()
    assert isinstance(fig, TimelineFigure)
    assert corner(fig._repr_png_()) == (255, 255, 255)
    dark = fig.dark_png()
    (tmp_path / "dark.png").write_bytes(dark)
    assert corner(dark) == tuple(int(DARK_BG[i:i + 2], 16) for i in (1, 3, 5))
    html = fig._repr_html_()
    assert html.count("<img ") == 2
    assert '[data-jp-theme-light="false"] .cl-theme-light-only{display:none !important}' in html
    assert corner(fig._repr_png_()) == (255, 255, 255)  # the light one is left as it was


def test_the_figures_own_theme_rules_win_over_jupyterlabs_img_rule() -> None:
    """Issue 29: with no chainlab stylesheet on the page, JupyterLab's
    ``.jp-RenderedHTMLCommon > img {display: block}`` (more specific) showed both pictures;
    the figure's own rules must be ``!important``."""
    import re

    from chainlab.timeline.plot import _THEME_CSS

    rules = re.findall(r"\{([^}]*)\}", _THEME_CSS)
    assert len(rules) == 3 and all(r.endswith("!important") for r in rules), rules
