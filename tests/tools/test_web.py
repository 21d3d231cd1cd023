"""The web provider against a local site: search APIs, HTML and PDF to text, and the
failures a run must survive (a killed provider, 50 MB, a slow server, a non-UTF-8 page)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from spu.config import ToolsConfig
from spu.tools.audit import AUDIT_FILE, read_audit
from spu.tools.providers import ProviderConfigError, ProviderError
from spu.tools.session import make_provider
from spu.tools.web import resolve_checked
from tests.tools.conftest import call_tool
from tests.tools.pages import BIG_BYTES, DOI, LocalSite


@pytest.fixture
def site() -> Iterator[LocalSite]:
    served = LocalSite()
    yield served
    served.kill()


OPTIONS = ("search_api", "search_url", "api_key_env")
"""The web provider's own options (``tools.options``); the rest are the service's."""


def web(site: LocalSite, **overrides) -> ToolsConfig:
    values = {"name": "web", "provider": "web", "search_api": "searxng",
              "search_url": site.url, "allow_local_fetch": True, "fetch_timeout_s": 3.0,
              "search_timeout_s": 3.0, **overrides}
    options = {k: values.pop(k) for k in OPTIONS if k in values}
    return ToolsConfig(**values, options=options)


def test_searxng_results(site: LocalSite) -> None:
    results = make_provider(web(site)).search("amine additive", 2)
    assert [(r.url, r.title) for r in results] == [
        ("https://site.test/0", "amine additive 0"), ("https://site.test/1", "amine additive 1")]
    assert results[0].published == "2024-01-01" and DOI in results[0].snippet
    assert "format=json" in site.httpd.requests[-1]  # type: ignore[attr-defined]


def test_brave_results_with_the_key_from_the_environment(site: LocalSite, monkeypatch) -> None:
    cfg = web(site, search_api="brave", search_url=f"{site.url}/brave/search",
              api_key_env="SPU_TEST_BRAVE_KEY")
    with pytest.raises(ProviderConfigError, match="SPU_TEST_BRAVE_KEY"):
        make_provider(cfg)
    monkeypatch.setenv("SPU_TEST_BRAVE_KEY", "test-key")
    (result,) = make_provider(cfg).search("x", 5)
    assert (result.url, result.snippet, result.published) == (
        "https://site.test/b", "a description", "2023-05-01")


def test_configuration_errors_name_the_key() -> None:
    with pytest.raises(ProviderConfigError, match="tools.options.search_url"):
        make_provider(ToolsConfig(provider="web", options={"search_api": "searxng"}))
    with pytest.raises(ProviderConfigError, match=r"^tools.options.search_url: Input should "
                                                  r"be a valid string \(got 8; "
                                                  r"tools.provider=web\) \(its options: "
                                                  r"api_key_env, search_api, search_url\)$"):
        make_provider(ToolsConfig(provider="web", options={"search_url": 8}))
    with pytest.raises(ProviderConfigError, match=r"^tools.options.serch_url: not an option "
                                                  r"of tools.provider=web "):
        make_provider(ToolsConfig(provider="web", options={"serch_url": "x"}))
    with pytest.raises(ProviderConfigError, match="tools.provider: unknown tools provider"):
        make_provider(ToolsConfig(provider="bing"))


def test_html_becomes_main_text_with_its_links(site: LocalSite) -> None:
    page = make_provider(web(site)).fetch(f"{site.url}/html")
    assert page.status == 200 and page.content_type == "text/html"
    assert "Isoxazole additives" in page.text and "Copyright" not in page.text
    assert f"https://doi.org/{DOI}" in page.text  # the link is kept


def test_pdf_becomes_text(site: LocalSite) -> None:
    page = make_provider(web(site)).fetch(f"{site.url}/pdf")
    assert page.content_type == "application/pdf"
    assert "Predicting reaction performance" in page.text and DOI in page.text


def test_redirects_are_followed(site: LocalSite) -> None:
    page = make_provider(web(site)).fetch(f"{site.url}/redirect")
    assert page.url.endswith("/html") and "Isoxazole" in page.text


def test_a_non_utf8_page_is_decoded_with_a_note(site: LocalSite) -> None:
    page = make_provider(web(site)).fetch(f"{site.url}/latin1")
    assert "Café crème" in page.text and page.note == "not UTF-8: decoded as cp1252"


def test_a_50_mb_response_is_cut_at_the_size_limit(site: LocalSite) -> None:
    page = make_provider(web(site, max_fetch_bytes=1_000_000)).fetch(f"{site.url}/big")
    assert len(page.text) == 1_000_000
    assert page.note == f"cut at the size limit: first 1000000 bytes of {BIG_BYTES} read"


def test_a_slow_server_is_an_error_within_the_timeout(site: LocalSite) -> None:
    start = time.monotonic()
    with pytest.raises(ProviderError, match="did not answer within 3 s"):
        make_provider(web(site)).fetch(f"{site.url}/slow")
    assert time.monotonic() - start < 10


def test_a_dripping_server_is_cut_at_the_deadline(site: LocalSite) -> None:
    page = make_provider(web(site, fetch_timeout_s=2.0)).fetch(f"{site.url}/drip")
    assert page.note is not None and page.note.startswith("cut at the time limit")
    assert 0 < len(page.text) < 1000


def test_a_killed_search_provider_is_a_clear_error(site: LocalSite) -> None:
    provider = make_provider(web(site))
    site.kill()
    with pytest.raises(ProviderError, match=r"the search API \(searxng\) failed: ConnectError"):
        provider.search("amine", 5)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "10.1.2.3", "192.168.0.1",
                                  "169.254.169.254", "0.0.0.0", "::ffff:127.0.0.1"])
def test_local_and_private_addresses_are_refused_without_a_connection(host: str) -> None:
    """The service runs on the host: fetch must not reach the host's own services.

    The check resolves and refuses before any connection is made, so no packet is sent.
    """
    with pytest.raises(ProviderError, match="local or private address"):
        resolve_checked(host, 80, allow_local=False)


def test_fetch_of_a_host_service_is_refused_by_default(site: LocalSite) -> None:
    provider = make_provider(web(site, allow_local_fetch=False))
    before = len(site.httpd.requests)  # type: ignore[attr-defined]
    with pytest.raises(ProviderError, match="fetch refused"):
        provider.fetch(f"{site.url}/html")
    with pytest.raises(ProviderError, match="not an http"):
        provider.fetch("file:///etc/passwd")
    assert len(site.httpd.requests) == before  # type: ignore[attr-defined]


def test_the_agent_gets_clear_errors_and_cut_texts_and_the_service_goes_on(
        site: LocalSite, start_service, tmp_path: Path) -> None:
    """A killed provider, a 50 MB response, a slow response, a non-UTF-8 page."""
    service = start_service(web(site, max_fetch_bytes=2_000_000, max_text_chars=5000),
                            tmp_path / "tools")
    url = service.url()
    error, text = call_tool(url, "fetch", {"url": f"{site.url}/big"})
    page = json.loads(text)
    assert not error and page["note"].startswith("cut at the size limit")
    assert "[cut: the first 5000 of 2000000 characters" in page["text"]
    error, text = call_tool(url, "fetch", {"url": f"{site.url}/latin1"})
    assert not error and "Café" in json.loads(text)["text"]
    start = time.monotonic()
    error, text = call_tool(url, "fetch", {"url": f"{site.url}/slow"})
    assert error and "did not answer within 3 s" in text
    assert time.monotonic() - start < 12
    site.kill()
    error, text = call_tool(url, "search", {"query": "amine"})
    assert error and text.startswith("search failed: the search API (searxng) failed")
    statuses = [(e.tool, e.status) for e in read_audit(tmp_path / "tools" / AUDIT_FILE)]
    assert statuses == [("fetch", "ok"), ("fetch", "ok"), ("fetch", "error"),
                        ("search", "error")]
