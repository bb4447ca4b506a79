"""Kind plugins (deniable.client.plugins), in this process: an entry point of the group
``deniable.kinds`` that importlib.metadata really discovers (a dist-info directory put on
``sys.path``), operators' ``module:attribute`` entries, the bad entries refused by name, the
collector's app factory and the CLI refusing to start on one, and the OpenAPI ``kind`` enum
read from the registry when the document is made. tests/client/test_new_kind.py does the same
through real collector and CLI processes."""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deniable.cli.main import main
from deniable.client import kinds
from deniable.client.errors import PluginError
from deniable.client.kinds import BUILT_IN, REGISTRY, registered, unregister
from deniable.client.plugins import load_plugins, split_specs
from deniable.collector import openapi
from deniable.collector.app import create_app
from deniable.collector.errors import CollectorError
from tests.client.kind_plugin import RATING, write_distribution
from tests.client.kind_rating import Rating

Install = Callable[[dict[str, str]], Path]
BUILT_IN_ORDER = tuple(name for name in kinds.KINDS if name in BUILT_IN)


@pytest.fixture()
def install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Install]:
    """Put a distribution with the given ``deniable.kinds`` entry points on ``sys.path``;
    afterwards, unregister every kind the test registered (the built-in ones stay)."""
    before = set(REGISTRY)

    def put(entries: dict[str, str]) -> Path:
        directory = write_distribution(tmp_path / "site", entries)
        monkeypatch.syspath_prepend(str(directory))
        return directory

    yield put
    for name in set(REGISTRY) - before:
        unregister(name)


def test_an_entry_point_of_the_group_registers_its_kind_once(install: Install) -> None:
    install({"rating": "tests.client.kind_rating:Rating"})  # the class: a factory
    assert "rating" not in REGISTRY
    (kind,) = load_plugins()
    assert isinstance(kind, Rating) and REGISTRY["rating"] is kind and kinds.KINDS[-1] == "rating"
    assert load_plugins() == (kind,)  # loaded once: the factory is not called again
    assert REGISTRY["rating"] is kind


def test_an_entry_may_name_a_kind_instance_registered_already(install: Install) -> None:
    install({"rating": "tests.client.kind_plugin:RATING"})
    with registered(RATING):  # the app's own module registered it at import
        assert load_plugins() == (RATING,)
        assert load_plugins(["tests.client.kind_plugin:RATING"]) == (RATING, RATING)


def test_an_operators_entries_register_their_kinds(install: Install) -> None:
    (kind,) = load_plugins(["tests.client.kind_rating:Rating"], group=None)
    assert REGISTRY["rating"] is kind


def test_the_loaded_kinds_are_logged_by_name_and_entry(install: Install,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    install({"rating": "tests.client.kind_rating:Rating"})
    logger = logging.getLogger("deniable.client")
    logger.addHandler(caplog.handler)  # a collector app in this process stops propagation
    try:
        with caplog.at_level(logging.INFO, logger="deniable.client"):
            load_plugins()
            load_plugins()
    finally:
        logger.removeHandler(caplog.handler)
    records = dict.fromkeys(caplog.records)  # each once, however many ways it came
    assert [r.getMessage() for r in records] == [
        "kind plugin loaded: rating from 'rating = tests.client.kind_rating:Rating' (entry "
        "point of deniable.kinds, kind-rating-plugin 0)"]


@pytest.mark.parametrize(("value", "specs"), [
    (None, ()), ("", ()), ("a.b:C", ("a.b:C",)), ("a.b:C, d:e.f  g:h", ("a.b:C", "d:e.f", "g:h")),
    (["a:b", "c:d"], ("a:b", "c:d")), ('["a:b", "c:d"]', ("a:b", "c:d"))])
def test_an_operators_entries_are_split_on_commas_and_spaces(value: object,
                                                            specs: tuple[str, ...]) -> None:
    assert split_specs(value) == specs


@pytest.mark.parametrize("value", ["mypkg.rating", "mypkg:", ":KIND", "a:b;c:d", 5, ["a:b", 1]])
def test_an_entry_not_of_the_form_module_attribute_is_refused(value: object) -> None:
    with pytest.raises(PluginError, match="DENIABLE_KINDS"):
        split_specs(value)


BAD = [
    ("tests.client.kind_rating:nope", "does not load: AttributeError"),
    ("tests.client.no_such_module:KIND", "does not load: ModuleNotFoundError"),
    ("tests.client.kind_plugin:broken", "does not load: RuntimeError: the plugin's own bug"),
    ("tests.client.kind_rating:STARS", "must name a Kind or a zero-argument factory of one. "
                                       "Got a tuple instead"),
    ("tests.client.kind_plugin:nameless", "gives a kind with no name. Got ['rating'] instead"),
    ("tests.client.kind_plugin:impostor", "'boolean', a built-in kind's name: a plugin never "
                                          "replaces a built-in kind"),
]


@pytest.mark.parametrize(("value", "message"), BAD)
def test_a_bad_entry_point_fails_naming_it_and_registers_nothing(
        install: Install, value: str, message: str) -> None:
    install({"rating": value})
    boolean = REGISTRY["boolean"]
    with pytest.raises(PluginError) as info:
        load_plugins()
    assert f"kind plugin 'rating = {value}' (entry point of deniable.kinds" in str(info.value)
    assert message in str(info.value)
    assert set(REGISTRY) == BUILT_IN and REGISTRY["boolean"] is boolean


@pytest.mark.parametrize(("value", "message"), BAD)
def test_a_bad_operators_entry_fails_naming_it(install: Install, value: str,
                                              message: str) -> None:
    with pytest.raises(PluginError) as info:
        load_plugins([value], group=None)
    assert f"kind plugin '{value}' (DENIABLE_KINDS)" in str(info.value)
    assert message in str(info.value) and set(REGISTRY) == BUILT_IN


def test_a_kind_whose_name_another_kind_has_is_refused(install: Install) -> None:
    with registered(Rating()) as first:
        with pytest.raises(PluginError, match="'rating', which another kind registered "
                                              "already has"):
            load_plugins(["tests.client.kind_rating:Rating"], group=None)
        assert REGISTRY["rating"] is first


def test_the_app_factory_refuses_to_start_on_a_bad_plugin_naming_it(
        install: Install, redis_url: str, metrics_file: Path) -> None:
    with pytest.raises(CollectorError, match=r"kind plugin 'tests.client.kind_rating:STARS' "
                                             r"\(DENIABLE_KINDS\) must name a Kind.*the "
                                             r"collector does not start"):
        create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file),
                    "KINDS": "tests.client.kind_rating:STARS"})


def test_the_app_factory_registers_the_plugins(install: Install, redis_url: str,
                                               metrics_file: Path) -> None:
    create_app({"REDIS_URL": redis_url, "METRICS_FILE": str(metrics_file), "AUTH": "off",
                "KINDS": "tests.client.kind_plugin:RATING"})
    assert REGISTRY["rating"] is RATING


@pytest.mark.parametrize(("setup", "entry"), [
    ({"DENIABLE_KINDS": "tests.client.kind_rating:nope"}, "'tests.client.kind_rating:nope' "
                                                          "(DENIABLE_KINDS)"),
    ({}, "'rating = tests.client.kind_plugin:impostor' (entry point of deniable.kinds")])
def test_the_cli_refuses_a_bad_plugin_with_a_message_and_status_1(
        install: Install, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        setup: dict[str, str], entry: str) -> None:
    install({"rating": "tests.client.kind_plugin:impostor"} if not setup else {})
    for name, value in setup.items():
        monkeypatch.setenv(name, value)
    assert main(["plan", "--epsilon", "1", "--margin", "0.05"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("deniable plan: error: kind plugin ") and entry in error


def test_the_openapi_kind_enum_names_a_kind_registered_after_import() -> None:
    schemas = openapi.document()["components"]["schemas"]
    assert schemas["Metric"]["properties"]["kind"]["enum"] == list(BUILT_IN_ORDER)
    with registered(Rating()):
        schemas = openapi.document()["components"]["schemas"]
        for name in ("Metric", "Counts", "MetricRegistration", "MetricEntry"):
            assert schemas[name]["properties"]["kind"]["enum"] == [*BUILT_IN_ORDER, "rating"]
    assert "rating" not in openapi.document()["components"]["schemas"]["Metric"][
        "properties"]["kind"]["enum"]

