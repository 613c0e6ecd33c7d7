"""References, templates and conditions: the small grammar of chainlab.plan.refs."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path
from typing import Any

import pytest

import chainlab.plan
from chainlab.plan.conditions import BoolOp, Cmp, ListExpr, Lit, Not, RefExpr
from chainlab.plan.refs import (
    Ref,
    RefError,
    TemplateSyntaxError,
    evaluate,
    is_template,
    iter_refs,
    parse_condition,
    parse_template,
    render_value,
    walk_path,
)

# ---------------------------------------------------------------------------- a resolver

STATE: dict[str, Any] = {
    "context": {"user": "ann", "n": 3, "flags": ["a", "b"], "cfg": {"on": True, "limit": 2.5}},
    "steps": {
        "fetch-data": {"items": [{"a b": 1, "name": "x"}, {"a b": 2, "name": "y"}], "count": 2},
        "words": ["hi", "there"],
        "empty": [],
        "nothing": None,
    },
    "memory": {"total": 10, "label": "ok", "rows": [{"id": 7}], "it's": {"k": "v"}},
}


def resolve(ref: Ref) -> Any:
    if ref.root == "context":
        return walk_path(STATE["context"], ref.path, ref.source)
    if ref.root == "steps":
        return walk_path(STATE["steps"][ref.target], ref.path, ref.source)
    if ref.root == "memory":
        return walk_path(STATE["memory"][ref.target], ref.path, ref.source)
    raise AssertionError(f"unexpected root {ref.root}")


def when(text: str) -> Any:
    return evaluate(parse_condition(text), resolve)


def M(target: str, *path: str | int, source: str | None = None) -> RefExpr:
    return RefExpr(Ref("memory", target, path, source or target))


# ---------------------------------------------------------------------------- paths


@pytest.mark.parametrize(
    ("text", "ref"),
    [
        ("{{ context.user }}", Ref("context", None, ("user",), "context.user")),
        ("{{ context }}", Ref("context", None, (), "context")),
        ("{{context.flags[0]}}", Ref("context", None, ("flags", 0), "context.flags[0]")),
        ("{{ steps.fetch-data.output }}",
         Ref("steps", "fetch-data", (), "steps.fetch-data.output")),
        ("{{ steps.fetch-data.output.items[0]['a b'] }}",
         Ref("steps", "fetch-data", ("items", 0, "a b"),
             "steps.fetch-data.output.items[0]['a b']")),
        ('{{ steps.s_1.output["k"][ -1 ] }}',
         Ref("steps", "s_1", ("k", -1), 'steps.s_1.output["k"][ -1 ]')),
        ("{{ steps.0abc.output.a.0 }}", Ref("steps", "0abc", ("a", "0"), "steps.0abc.output.a.0")),
        ("{{ memory.rows[0].id }}", Ref("memory", "rows", (0, "id"), "memory.rows[0].id")),
        ("{{ rows[0].id }}", Ref("memory", "rows", (0, "id"), "rows[0].id")),
        ("{{ my-key }}", Ref("memory", "my-key", (), "my-key")),
        ("{{ memory.k['it\\'s'] }}", Ref("memory", "k", ("it's",), "memory.k['it\\'s']")),
        ("{{ input.table_id }}", Ref("input", None, ("table_id",), "input.table_id")),
        ("{{ output.ids[2] }}", Ref("output", None, ("ids", 2), "output.ids[2]")),
        ("{{ nothing_special }}", Ref("memory", "nothing_special", (), "nothing_special")),
    ],
)
def test_reference_paths(text: str, ref: Ref) -> None:
    template = parse_template(text)
    assert template.parts == (ref,)
    assert template.whole == ref
    assert template.refs == (ref,)
    assert str(ref) == ref.source


@pytest.mark.parametrize(
    ("text", "message", "pos"),
    [
        ("{{ }}", "empty reference", 3),
        ("{{ context.x", "expected '}}' to close the reference", 12),
        ("{{ a }", "expected '}}' to close the reference", 5),
        ("{{ a b }}", "expected '}}' to close the reference", 5),
        ("abc {{", "expected a reference", 6),
        ("{{ steps.a }}", "expected steps.a.output[...]", 3),
        ("{{ steps.a.input }}", "expected steps.a.output[...]", 3),
        ("{{ steps[0].output }}", "expected steps.ID.output", 3),
        ("{{ memory }}", "expected memory.KEY", 3),
        ("{{ 1abc }}", "expected a reference", 3),
        ("{{ a. }}", "expected a key after '.'", 5),
        ("{{ a[x] }}", "expected an index or a quoted key inside [...]", 5),
        ("{{ a[0 }}", "expected ']'", 7),
        ("{{ a['x }}", "unterminated string", 10),
        ("{{ true }}", "'true' is a keyword, not a reference", 3),
        ("{{ not }}", "'not' is a keyword, not a reference", 3),
        ("ok {{ a }} then {{ }}", "empty reference", 19),
    ],
)
def test_template_syntax_errors(text: str, message: str, pos: int) -> None:
    with pytest.raises(TemplateSyntaxError) as info:
        parse_template(text)
    assert message in str(info.value)
    assert info.value.pos == pos
    assert info.value.source == text
    assert f"at position {pos} in {text!r}" in str(info.value)


# ---------------------------------------------------------------------------- templates


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # one whole reference keeps the value's type
        ("{{ context.n }}", 3),
        ("{{ context.cfg }}", {"on": True, "limit": 2.5}),
        ("{{ steps.words.output }}", ["hi", "there"]),
        ("{{ steps.nothing.output }}", None),
        ("{{ context.cfg.on }}", True),
        ("{{steps.fetch-data.output.items[1]['a b']}}", 2),
        ("{{ rows[0] }}", {"id": 7}),
        # anything around it (even whitespace) makes it text
        (" {{ context.n }}", " 3"),
        ("{{ context.n }} ", "3 "),
        ("{{ context.n }}{{ context.n }}", "33"),
        # strings as they are, everything else as JSON
        ("Hi {{ context.user }}!", "Hi ann!"),
        ("n={{ context.n }}", "n=3"),
        ("cfg={{ context.cfg }}", 'cfg={"on": true, "limit": 2.5}'),
        ("w={{ steps.words.output }}", 'w=["hi", "there"]'),
        ("none={{ steps.nothing.output }}", "none=null"),
        ("on={{ context.cfg.on }}", "on=true"),
        ("{{ label }}/{{ memory.total }}", "ok/10"),
        # no opener: literal text, braces and all
        ("{ context.n } }}", "{ context.n } }}"),
        ("plain", "plain"),
    ],
)
def test_render(text: str, expected: Any) -> None:
    assert parse_template(text).render(resolve) == expected
    assert render_value(text, resolve) == expected


def test_render_keeps_literal_parts_in_order() -> None:
    t = parse_template("a {{ label }} b {{ context.n }} c")
    assert t.parts[0] == "a "
    assert t.parts[2] == " b "
    assert t.parts[4] == " c"
    assert [r.source for r in t.refs] == ["label", "context.n"]
    assert t.whole is None
    assert t.render(resolve) == "a ok b 3 c"


def test_render_value_walks_nested_args() -> None:
    args = {
        "table_id": "t-{{ context.user }}",
        "rows": [{"id": "{{ memory.rows[0].id }}", "tags": ["x", "{{ context.flags }}"]}],
        "count": "{{ steps.fetch-data.output.count }}",
        "n": 1,
        "ok": True,
        "nothing": None,
        "braces": "{ not a ref }",
    }
    assert render_value(args, resolve) == {
        "table_id": "t-ann",
        "rows": [{"id": 7, "tags": ["x", ["a", "b"]]}],
        "count": 2,
        "n": 1,
        "ok": True,
        "nothing": None,
        "braces": "{ not a ref }",
    }
    # the input is not mutated
    assert args["count"] == "{{ steps.fetch-data.output.count }}"


def test_is_template() -> None:
    assert is_template("{{ a }}")
    assert is_template("x {{")
    assert not is_template("{ a }")
    assert not is_template(3)
    assert not is_template(None)


def test_render_propagates_ref_errors() -> None:
    with pytest.raises(RefError) as info:
        render_value({"x": ["{{ context.missing }}"]}, resolve)
    assert "context.missing: no key 'missing'" in str(info.value)


# ---------------------------------------------------------------------------- conditions


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        ("not a or b", BoolOp("or", Not(M("a")), M("b"))),
        ("a or b and c", BoolOp("or", M("a"), BoolOp("and", M("b"), M("c")))),
        ("a and b or c", BoolOp("or", BoolOp("and", M("a"), M("b")), M("c"))),
        ("(a or b) and c", BoolOp("and", BoolOp("or", M("a"), M("b")), M("c"))),
        ("a or b or c", BoolOp("or", BoolOp("or", M("a"), M("b")), M("c"))),
        ("not a == b", Not(Cmp("==", M("a"), M("b")))),
        ("not not a", Not(Not(M("a")))),
        ("a not in b", Cmp("not in", M("a"), M("b"))),
        ("a  not   in  [1, 'x']", Cmp("not in", M("a"), ListExpr((Lit(1), Lit("x"))))),
        ("x in [1, [2, y]]", Cmp("in", M("x"), ListExpr((Lit(1), ListExpr((Lit(2), M("y"))))))),
        ("[] == []", Cmp("==", ListExpr(()), ListExpr(()))),
        ("-1 < x", Cmp("<", Lit(-1), M("x"))),
        ("1.5e3 >= 2", Cmp(">=", Lit(1500.0), Lit(2))),
        ("2.50 != 'two'", Cmp("!=", Lit(2.5), Lit("two"))),
        ('"say \\"hi\\"" == a', Cmp("==", Lit('say "hi"'), M("a"))),
        ("true", Lit(True)),
        ("FALSE or NULL == None", BoolOp("or", Lit(False), Cmp("==", Lit(None), Lit(None)))),
        # keywords only count as whole words
        ("true_value", M("true_value")),
        ("notify and orange", BoolOp("and", M("notify"), M("orange"))),
        ("not_ready", M("not_ready")),
        ("index in items", Cmp("in", M("index"), M("items"))),
        # braced and bare references are the same thing
        ("{{ a }} == {{ steps.b.output.c }}",
         Cmp("==", M("a"), RefExpr(Ref("steps", "b", ("c",), "steps.b.output.c")))),
        ("steps.b.output.c <= context.n",
         Cmp("<=", RefExpr(Ref("steps", "b", ("c",), "steps.b.output.c")),
             RefExpr(Ref("context", None, ("n",), "context.n")))),
        ("x-1 > 0", Cmp(">", M("x-1"), Lit(0))),  # '-' belongs to keys (ids have dashes)
    ],
)
def test_condition_parse_tree(text: str, tree: Any) -> None:
    assert parse_condition(text) == tree


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty condition"),
        ("   ", "empty condition"),
        ("a ==", "expected a value"),
        ("a or", "expected a value"),
        ("(a", "expected ')'"),
        ("a)", "unexpected text"),
        ("[1, 2", "expected ',' or ']'"),
        ("a == b == c", "unexpected text"),
        ("1 < 2 < 3", "unexpected text"),
        ("a === b", "unexpected character '='"),
        ("a not b", "unexpected text"),
        ("'open", "unterminated string"),
        ("a && b", "unexpected text"),
        ("- 1", "unexpected character '-'"),
        ("1.", "unexpected text"),
        ("{{ }}", "empty reference"),
        ("{{ steps.x }} == 1", "expected steps.x.output"),
        ("lambda: 1", "unexpected text"),
        ("a if b else c", "unexpected text"),
        ("f(x)", "unexpected text"),
        ("a.b()", "unexpected text"),
        ("__import__('os').system('echo hacked')", "unexpected text"),
    ],
)
def test_condition_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(TemplateSyntaxError) as info:
        parse_condition(text)
    assert message in str(info.value)


def test_deeply_nested_condition_is_a_syntax_error_not_a_crash() -> None:
    with pytest.raises(TemplateSyntaxError, match="nested too deeply"):
        parse_condition("(" * 2000 + "1" + ")" * 2000)
    with pytest.raises(TemplateSyntaxError, match="nested too deeply"):
        parse_condition("not " * 2000 + "true")
    assert parse_condition("(" * 50 + "1" + ")" * 50) == Lit(1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("context.n == 3", True),
        ("context.n == 3.0", True),
        ("context.n != 3", False),
        ("context.n > 2 and context.n < 4", True),
        ("context.n >= 3 and context.n <= 3", True),
        ("context.n > 3", False),
        ("context.cfg.limit < 3", True),
        ("label == 'ok'", True),
        ("label > 'abc'", True),
        ("'b' < 'a'", False),
        ("context.user in ['ann', 'bob']", True),
        ("context.user not in ['ann', 'bob']", False),
        ("'a' in context.flags", True),
        ("'c' not in context.flags", True),
        ("'on' in context.cfg", True),  # key of an object
        ("'nn' in context.user", True),  # substring
        ("steps.words.output == ['hi', 'there']", True),
        ("steps.words.output[1] == 'there'", True),
        ("steps.empty.output == []", True),
        ("steps.nothing.output == null", True),
        ("{{ steps.fetch-data.output.count }} == 2", True),
        ("steps.fetch-data.output.items[0]['a b'] < steps.fetch-data.output.items[1]['a b']",
         True),
        ("memory.rows[0].id == 7", True),
        ("not context.cfg.on", False),
        ("not (context.n == 3 or total == 1)", False),
        ("not context.n == 4 and total == 10", True),  # (not (n == 4)) and ...
        ("false or total == 10 and label == 'no'", False),  # and binds tighter
        ("(false or total == 10) and label == 'ok'", True),
        ("true and not false", True),
        ("null == none", True),
        ("[1, 2] == [1, 2]", True),
        ("[context.n, total] == [3, 10]", True),
    ],
)
def test_condition_evaluation(text: str, expected: bool) -> None:
    assert when(text) is expected


def test_boolean_operators_short_circuit() -> None:
    # the right side is never resolved, so the missing key is not an error
    assert when("false and context.missing == 1") is False
    assert when("true or context.missing == 1") is True
    with pytest.raises(RefError):
        when("true and context.missing == 1")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("context.n < 'x'", "cannot compare 3 < 'x'"),
        ("label >= 1", "cannot compare 'ok' >= 1"),
        ("true < 2", "cannot compare True < 2"),
        ("null > 0", "cannot compare None > 0"),
        ("[1] < [2]", "cannot compare [1] < [2]"),
        ("context.cfg <= context.cfg", "cannot compare"),
        ("1 in 5", "'in' needs a list, object or string on the right"),
        ("1 not in null", "'not in' needs a list, object or string on the right"),
        ("1 in 'abc'", "'in' on a string needs a string on the left"),
    ],
)
def test_comparing_incompatible_types_raises_type_error(text: str, message: str) -> None:
    with pytest.raises(TypeError) as info:
        when(text)
    assert message in str(info.value)


def test_iter_refs_left_to_right() -> None:
    expr = parse_condition("a == 1 and (not steps.s.output.x in [b, {{ c.d }}] or context.e)")
    assert [r.source for r in iter_refs(expr)] == ["a", "steps.s.output.x", "b", "c.d", "context.e"]
    assert list(iter_refs(parse_condition("1 == 1"))) == []


# ---------------------------------------------------------------------------- walk_path


def test_walk_path_follows_keys_and_indexes() -> None:
    value = {"a": [{"b": 1}, {"b": [10, 20]}]}
    assert walk_path(value, (), "x") is value
    assert walk_path(value, ("a", 1, "b", -1), "x") == 20
    assert walk_path(value, ("a", -2, "b"), "x") == 1


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        ({"alpha": 1, "beta": 2}, ("alpah",), "src: no key 'alpah'; did you mean 'alpha'?"),
        ({"a": 1}, ("zzz",), "src: no key 'zzz' (known: a)"),
        ([1, 2], (2,), "src: index [2] out of range (length 2)"),
        ([1, 2], (-3,), "src: index [-3] out of range (length 2)"),
        ({"a": 1}, (0,), "src: cannot index an object with [0]"),
        ({"a": None}, ("a", 0), "src: cannot index null with [0]"),
        ("text", (0,), "src: cannot index a string with [0]"),
        ([1], ("a",), "src: the value is a list, it has no key 'a'"),
        ({"a": {"b": "s"}}, ("a", "b", "c"), "src: a.b is a string, it has no key 'c'"),
        ({"a": True}, ("a", "x"), "src: a is a boolean, it has no key 'x'"),
        ({"a": None}, ("a", "x"), "src: a is null, it has no key 'x'"),
    ],
)
def test_walk_path_errors(value: Any, path: tuple[str | int, ...], message: str) -> None:
    with pytest.raises(RefError) as info:
        walk_path(value, path, "src")
    assert str(info.value) == message
    assert isinstance(info.value, LookupError)


# ---------------------------------------------------------------------------- never eval


HOSTILE = [
    "__import__('os').system('echo pwned')",
    "{{ __import__('os').system('echo pwned') }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ context.__class__ }}",
    "{{ steps.a.output.__globals__ }}",
    "open('/etc/passwd').read()",
    "[x for x in ().__class__.__bases__]",
    "exec('1')",
    "{% for x in y %}{{ x }}{% endfor %}",
    "{{ config.items() }}",
    "lambda: 0",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_no_input_ever_reaches_eval(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("eval/exec/compile was called")

    for name in ("eval", "exec", "compile"):
        monkeypatch.setattr(builtins, name, forbidden)
    # each input parses as an error, or as plain data and references that are only ever
    # looked up as keys in JSON data; nothing is executed
    outcomes = []
    try:
        out = render_value({"x": [text]}, lambda ref: f"<{ref.source}>")
        assert isinstance(out["x"][0], str)
        outcomes.append("template")
    except TemplateSyntaxError:
        outcomes.append("template error")
    try:
        value = evaluate(parse_condition(text), lambda ref: ref.source)
        assert value is None or isinstance(value, str | bool | int | float | list)
        outcomes.append("condition")
    except TemplateSyntaxError:
        outcomes.append("condition error")
    except TypeError:  # e.g. comparing a string with a number
        outcomes.append("condition type error")
    assert len(outcomes) == 2


def test_dunder_names_are_plain_keys() -> None:
    ref = parse_template("{{ context.__class__ }}").whole
    assert ref == Ref("context", None, ("__class__",), "context.__class__")
    with pytest.raises(RefError, match="no key '__class__'"):
        resolve(ref)
    ref = parse_template("{{ steps.a.output.__globals__ }}").whole
    assert ref == Ref("steps", "a", ("__globals__",), "steps.a.output.__globals__")
    with pytest.raises(RefError, match="it has no key '__globals__'"):
        walk_path(print, ref.path, ref.source)  # not even a real function is introspected


def test_plan_package_never_calls_eval_exec_or_a_template_engine() -> None:
    root = Path(chainlab.plan.__file__).parent
    for path in sorted(root.glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in {"eval", "exec", "compile", "__import__"}, path
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                assert not any(n.split(".")[0] in {"jinja2", "mako", "ast"} for n in names), path


WHOLE_PATHS = [
    "{{ steps.a.output }}", "{{steps.a-b.output.x.y}}", "{{ \tcontext.customer\n}}",
    "{{ memory.k.v }}", "{{ key }}", "{{ key.0.x }}", "{{ steps.a.output.0 }}",
    "{{ steps.a }}", "{{ steps }}", "{{ and }}", "{{ none.x }}", "{{ input.x }}",
    "{{ output }}", "{{ _x.-y }}",
    # not for the quick reading (the general parser reads them, or refuses them)
    "{{ steps.a.output[0] }}", "{{ 0x }}", "{{ a. }}", "{{ a..b }}", "{{}}", "x {{ a }}",
    "{{ a }} ", "{{ a }}{{ b }}", "{{ -a }}", "{{ a.b }} }}", "{{ a.b",
]


@pytest.mark.parametrize("text", WHOLE_PATHS)
def test_the_quick_reading_of_a_whole_path_agrees_with_the_parser(text: str) -> None:
    """parse_template reads ``{{ root.key }}`` with one regular expression: the same Ref, or
    the same error, as the general parser (which reads everything else)."""
    from chainlab.plan.syntax import Cursor, parse_braced_ref, parse_whole_path

    def general() -> Any:
        cur = Cursor(text)
        ref = parse_braced_ref(cur)
        return ref if cur.at_end() else None  # (a longer text: not one whole reference)

    try:
        expected: Any = general()
    except TemplateSyntaxError as exc:
        expected = (str(exc), exc.pos)
    try:
        quick: Any = parse_whole_path(text)
    except TemplateSyntaxError as exc:
        quick = (str(exc), exc.pos)
    if quick is None:  # left to the general parser: then it is not a plain whole path
        assert "[" in text or expected is None or isinstance(expected, tuple)
    else:
        assert quick == expected
