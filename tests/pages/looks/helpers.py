"""Plain helpers for the tests in every look: axe-core, contrast, layout."""

from __future__ import annotations

from typing import Any

from axe_playwright_python.sync_playwright import Axe  # type: ignore[import-untyped]  # ships no types

SERIOUS = {"serious", "critical"}


def serious_violations(page: Any) -> list[str]:
    """axe-core's serious and critical findings on the page as it is now, one line each."""
    response = Axe().run(page).response
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:4]}"
        for v in response["violations"]
        if v.get("impact") in SERIOUS
    ]


# WCAG relative luminance and contrast, with the background the element really sits on
# (the first ancestor with an opaque one).
CONTRAST_OF = """
(element) => {
  const parse = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const channel = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const luminance = ([r, g, b]) => 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  let node = element;
  let background = null;
  while (node && node.nodeType === 1) {
    const rgba = parse(getComputedStyle(node).backgroundColor);
    if (rgba.length === 3 || (rgba.length === 4 && rgba[3] === 1)) { background = rgba; break; }
    node = node.parentElement;
  }
  background = background || [255, 255, 255];
  const [a, b] = [luminance(parse(getComputedStyle(element).color)), luminance(background)];
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}
"""


def contrast(locator: Any) -> float:
    return float(locator.evaluate(CONTRAST_OF))


def no_horizontal_scroll(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def inside_viewport(page: Any, locator: Any) -> bool:
    """Wholly on screen across (a phone must never need sideways scrolling to reach it)."""
    box = locator.bounding_box()
    width = page.viewport_size["width"]
    return box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5
