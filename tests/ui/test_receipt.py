"""The cost receipt (issue 35): its arithmetic from what the compile table measured, and the
Performance tab's handler in the page's language, with the reference's name kept out of Markdown."""

from types import SimpleNamespace

import pytest

from backend.serving.cost import Reference, format_receipt, hourly_price, receipt

TR = SimpleNamespace(headers={"accept-language": "tr-TR,tr;q=0.9"})


def _status(**device):
    return {"device": {"torch_device": "cpu", "dtype": "float32", **device}, "neuron_cores": None,
            "model": "embedded:test", "shapes": [
                {"mode": "eager", "shape": "256x256", "state": "warm", "steady_quiet_seconds": 2.0, "steady_runs": 5,
                 "steady_load": 0.25},
                {"mode": "eager", "shape": "256x256*2", "state": "warm", "steady_quiet_seconds": 3.0, "steady_runs": 3},
                {"mode": "compiled", "shape": "512x512", "state": "warm", "steady_quiet_seconds": None,
                 "steady_runs": 0},
                {"mode": "compiled", "shape": "64x64", "state": "cold", "steady_quiet_seconds": 1.0, "steady_runs": 1}]}


def test_images_per_hour_and_the_price_of_a_thousand_come_from_the_quiet_steady_figure():
    data = receipt(_status(), {"eager": 2}, price_per_hour=1.8, reference=Reference("g5", 1.0, 4.0))
    one, batch = data["rows"]  # no steady run, or not warm: no row
    assert (one["signature"], one["images_per_hour"], one["parallel"]) == ("256x256", 3600.0, 2)  # 2 s, two at once
    assert one["per_thousand"] == pytest.approx(0.5)  # $1.8/h over 3600 images/h
    assert batch["images_per_hour"] == pytest.approx(3600 / 3 * 2 * 2)  # a batch of two per run
    assert data["reference"]["images_per_hour"] == 900 and data["reference"]["per_thousand"] == pytest.approx(1.0 / 0.9)
    text = format_receipt(data)
    assert "cpu, float32, model embedded:test" in text and "$0.50" in text and "2 at once" in text
    assert "| eager | 256x256 | 2.00 | 5 | 25% |" in text and "| eager | 256x256*2 | 3.00 | 3 | — |" in text
    assert "not measured here" in text and "says nothing of hardware this app has not run on" in text


def test_the_price_comes_from_the_flag_or_the_dated_table_never_a_guess():
    assert hourly_price(2.5, "trn1.2xlarge") == (2.5, "--price-per-hour")
    price, source = hourly_price(0, "trn1.2xlarge")
    assert price == 1.34375 and "as of" in source
    assert hourly_price(0, "trn2.3xlarge")[0] is None  # not in the table: no figure
    data = receipt(_status(), {}, price_per_hour=0)
    assert data["rows"][0]["per_thousand"] is None and "give --price-per-hour" in format_receipt(data)


def test_a_reference_needs_positive_figures():
    for price, seconds in ((0, 1), (1, -2), (float("nan"), 1)):
        with pytest.raises(ValueError):
            Reference("x", price, seconds)


def test_the_performance_tab_makes_the_receipt_in_turkish_and_keeps_markup_out(studio, manager):
    request = manager.validate("a red circle", 64, 64, steps=2, seed=1)
    for _ in range(2):
        manager.generate(request)
    text = studio.performance_tab.cost_receipt(1.2, "[click](http://evil.example) g5", 1.0, 2.0, page=TR)
    assert "Ölçüldüğü yer" in text and "| eager | 64x64 |" in text and "sizin girdiğiniz" in text
    # The name is code, not Markdown: no link, no colon left to make one.
    assert "](" not in text and "`click(http//evil.example) g5`" in text
    assert "$1.2/saat" in text
    refused = studio.performance_tab.cost_receipt(0, "x", -1, 2.0, page=TR)
    assert refused.startswith("Karşılaştırma için pozitif")
