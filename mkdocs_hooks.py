"""MkDocs hooks for the documentation site (mkdocs.yml): links that leave docs/.

The pages link to files elsewhere in the repository (the README's settings table, the VM kit's
README), which work on a code host but are not pages of the site. Each such link is checked
here instead: the file must exist in the repository and, for a Markdown file, the anchor must
name one of its headings; otherwise the build fails. On the site it becomes the link text with
the repository path beside it (or a link under ``repo_url``, once mkdocs.yml sets one).
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from markdown.extensions.toc import slugify_unicode
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parent
LINK = re.compile(r"\[(?P<text>[^\]]+)\]\((?P<target>\.\./[^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
# A sample the doc tests skip is fenced ```python fragment (or ```js fragment): an info string
# Python-Markdown does not read as a fence, which would swallow the page up to the next fence.
FRAGMENT_FENCE = re.compile(r"^(\s*```+)\s*(\w+) fragment\s*$", re.MULTILINE)


def anchors(path: Path) -> set[str]:
    """The heading anchors of a Markdown file, as GitHub and the site's toc spell them."""
    return {slugify_unicode(title.replace("`", ""), "-")
            for title in HEADING.findall(path.read_text(encoding="utf-8"))}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **_: Any) -> str:
    """Check each link out of docs/ and rewrite it for the site; drop the fragment mark of
    a fence (the site shows the sample as any other)."""
    markdown = FRAGMENT_FENCE.sub(r"\1\2", markdown)
    page_dir = posixpath.dirname(page.file.src_uri)
    repo_url = (config.get("repo_url") or "").rstrip("/")

    def rewrite(match: re.Match[str]) -> str:
        target = match["target"]
        path, _, anchor = target.partition("#")
        in_repo = posixpath.normpath(posixpath.join("docs", page_dir, path))
        if in_repo.startswith("../") or not (ROOT / in_repo).exists():
            raise PluginError(f"{page.file.src_uri}: the link {target} names no file of the "
                              f"repository")
        if anchor and in_repo.endswith(".md") and anchor not in anchors(ROOT / in_repo):
            raise PluginError(f"{page.file.src_uri}: the link {target}: {in_repo} has no "
                              f"heading #{anchor}")
        shown = in_repo + (f"#{anchor}" if anchor else "")
        if repo_url:
            return f"[{match['text']}]({repo_url}/blob/main/{shown})"
        return f"{match['text']} (`{shown}` in the repository)"

    return LINK.sub(rewrite, markdown)
