"""JSON Patch (RFC 6902): the examples of its appendix A, and the edges our fold relies on."""

from __future__ import annotations

from typing import Any

import pytest

from app.runtime.errors import InvalidPatch
from app.runtime.session.json_patch import apply_patch, json_equal, parse_pointer

# (document, patch, result) from RFC 6902 appendix A (A.1 - A.16, the ones that apply).
APPLIES: list[tuple[Any, list[dict[str, Any]], Any]] = [
    ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
    (
        {"foo": ["bar", "baz"]},
        [{"op": "add", "path": "/foo/1", "value": "qux"}],
        {"foo": ["bar", "qux", "baz"]},
    ),
    ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
    ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
    (
        {"baz": "qux", "foo": "bar"},
        [{"op": "replace", "path": "/baz", "value": "boo"}],
        {"baz": "boo", "foo": "bar"},
    ),
    (
        {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
        [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
        {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
    ),
    (
        {"foo": ["all", "grass", "cows", "eat"]},
        [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
        {"foo": ["all", "cows", "eat", "grass"]},
    ),
    (
        {"baz": "qux", "foo": ["a", 2, "c"]},
        [
            {"op": "test", "path": "/baz", "value": "qux"},
            {"op": "test", "path": "/foo/1", "value": 2},
        ],
        {"baz": "qux", "foo": ["a", 2, "c"]},
    ),
    (
        {"foo": "bar"},
        [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
        {"foo": "bar", "child": {"grandchild": {}}},
    ),
    (
        {"foo": ["bar"]},
        [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
        {"foo": ["bar", ["abc", "def"]]},
    ),
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
    ({"foo": None}, [{"op": "add", "path": "/foo", "value": 1}], {"foo": 1}),
    ({"a": [1]}, [{"op": "copy", "from": "/a", "path": "/b"}], {"a": [1], "b": [1]}),
    ({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}], {"b": 2}),
]

# Patches that must not apply (A.9, A.12, A.15 and our edges).
REFUSED: list[tuple[Any, list[Any]]] = [
    ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}]),
    ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}]),
    ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}]),
    ({"foo": ["bar"]}, [{"op": "add", "path": "/foo/5", "value": 1}]),
    ({"a": True}, [{"op": "test", "path": "/a", "value": 1}]),  # true is not 1
    ({"a": []}, [{"op": "remove", "path": "/a/0"}]),
    ({"a": [1]}, [{"op": "add", "path": "/a/01", "value": 1}]),  # no leading zeros
    ({"a": {}}, [{"op": "move", "from": "/a", "path": "/a/b"}]),  # into its own child
    ({"a": 1}, [{"op": "replace", "path": "/b", "value": 1}]),  # replace needs the target
    ({"a": 1}, [{"op": "nope", "path": "/a"}]),
    ({"a": 1}, [{"op": "add", "path": "a", "value": 1}]),  # not a pointer
    ({"a": 1}, [{"op": "add", "path": "/b"}]),  # no value
    ({"a": 1}, {"op": "add"}),  # not a list
    ({"a": 1}, ["add"]),
]


@pytest.mark.parametrize(("doc", "patch", "result"), APPLIES)
def test_patches_of_the_rfc_apply(doc: Any, patch: list[dict[str, Any]], result: Any) -> None:
    before = repr(doc)
    assert apply_patch(doc, patch) == result
    assert repr(doc) == before  # the input is never edited


@pytest.mark.parametrize(("doc", "patch"), REFUSED)
def test_patches_that_do_not_apply_are_invalid_patch(doc: Any, patch: Any) -> None:
    before = repr(doc)
    with pytest.raises(InvalidPatch):
        apply_patch(doc, patch)
    assert repr(doc) == before


def test_a_failing_operation_leaves_nothing_of_the_earlier_ones() -> None:
    doc = {"a": 1}
    patch = [{"op": "add", "path": "/b", "value": 2}, {"op": "test", "path": "/a", "value": 3}]
    with pytest.raises(InvalidPatch):
        apply_patch(doc, patch)
    assert doc == {"a": 1}


def test_pointer_and_equality_rules() -> None:
    assert parse_pointer("") == []
    assert parse_pointer("/a~1b/~0c/") == ["a/b", "~c", ""]
    assert json_equal({"a": [1, 2.0]}, {"a": [1.0, 2]})
    assert not json_equal(False, 0)
    assert not json_equal([1], [1, 2])
    assert not json_equal("1", 1)
