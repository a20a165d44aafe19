"""The web service serves the exchange's FIX 4.4 dictionary for people's own clients."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import httpx
import pytest

from shared.fix.dictionary import exchange_dictionary, installed_dictionary
from tests.e2e.webstack import web_process

pytestmark = pytest.mark.e2e


def test_the_page_serves_the_exchanges_dictionary(redis_url: str) -> None:
    with web_process(redis_url) as web:
        got = httpx.get(f"{web.url}/fix/FIXLAB-FIX44.xml", timeout=10)
    assert got.status_code == 200
    assert got.headers["content-type"].startswith("application/xml")
    assert "FIXLAB-FIX44.xml" in got.headers["content-disposition"]
    assert got.text == exchange_dictionary(installed_dictionary().read_text())
    (er,) = [m for m in ET.fromstring(got.text).iter("message") if m.get("msgtype") == "8"]
    assert "TrdMatchID" in [f.get("name") for f in er if f.tag == "field"]
