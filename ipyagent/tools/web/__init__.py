"""Web tools: ``web_search`` (SearXNG's JSON API or DuckDuckGo's HTML page) and
``fetch_url`` (a page as readable text, bounded, public addresses only by default).

``search`` holds the ``SearchBackend`` protocol every backend follows; ``searxng`` and
``duckduckgo`` are the backends; ``guard`` decides which addresses may be reached;
``fetch`` reads one page; ``html_text`` turns HTML into text; ``tools`` makes the tools.
"""

from .search import SearchBackend, SearchResult, SearchUnavailable
from .tools import WEB_TOOLS, WebConfig, web_tools

__all__ = ["SearchBackend", "SearchResult", "SearchUnavailable", "WEB_TOOLS", "WebConfig", "web_tools"]
