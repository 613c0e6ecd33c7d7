"""Tables of invalid plans with their exact problems, and of valid plans with their exact
dependencies.

Problems are compared IN THE ORDER PRODUCED: the order is part of the contract (the loader
reports chain fields, then steps in declaration order, each in field order; ``validate``
reports id/save_as clashes, then each step in declaration order (dependencies, references,
tool, args, rollback), then options, then the cycle, then sub-chain problems), and a UI
lists problems in that order.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from chainlab import Chain, CycleError, PlanError, Toolbox
from chainlab.plan import PROBLEM_CODES


@dataclass(frozen=True)
class Bad:
    """An invalid plan and exactly what must be reported about it."""

    id: str
    plan: str | dict[str, Any]
    problems: list[tuple[str, str | None]]
    stage: Literal["load", "validate"] = "validate"
    fmt: Literal["yaml", "json", "dict"] = "yaml"
    context: dict[str, Any] | None = None
    fields: list[str | None] | None = None  # problem.field, same order as problems
    says: dict[int, list[str]] = field(default_factory=dict)  # problem index -> substrings
    lines: list[int | None] | None = None  # problem.line, same order as problems
    cycle: list[str] | None = None


def y(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


BAD: list[Bad] = [
    # ------------------------------------------------------------------ duplicate_step
    Bad("duplicate_step", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: a, tool: split, args: {text: ho}}
        """), [("duplicate_step", "a")], fields=["id"],
        says={0: ["'a'", "more than once"]}),
    Bad("duplicate_step_three_times", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: b, tool: split, args: {text: hi}}
          - {id: a, tool: split, args: {text: hi}}
          - {id: a, tool: split, args: {text: hi}}
        """), [("duplicate_step", "a"), ("duplicate_step", "a")]),
    # ------------------------------------------------------------------ reference_type
    Bad("reference_type_output_into_a_string", y("""
        name: c
        steps:
          - {id: words, tool: split, args: {text: hi}}
          - {id: again, tool: split, args: {text: "{{ steps.words.output }}"}}
        """), [("reference_type", "again")], fields=["args.text"], lines=[4],
        says={0: ["'steps.words.output' is array of string", "wants 'text' as string"]}),
    Bad("reference_type_context_string_into_a_list", y("""
        name: c
        steps:
          - {id: est, tool: estimate, args: {tasks: "{{ context.customer }}"}}
        """), [("reference_type", "est")], context={"customer": "Ada"},
        says={0: ["'context.customer' is string (the context value)",
                  "wants 'tasks' as array of string"]}),
    Bad("reference_type_output_field_and_memory", y("""
        name: c
        steps:
          - {id: est, tool: estimate, args: {tasks: [a]}, save_as: hours}
          - {id: w, tool: split, args: {text: "{{ hours }}"}}
        """), [("reference_type", "w")], says={0: ["is object (the output of 'estimate')"]}),
    # ------------------------------------------------------------------ unknown_dependency
    Bad("unknown_dependency_did_you_mean", y("""
        name: c
        steps:
          - {id: fetch, tool: split, args: {text: hi}}
          - {id: count, tool: split, args: {text: hi}, depends_on: [fecth]}
        """), [("unknown_dependency", "count")], fields=["depends_on"],
        says={0: ["'fecth'", "did you mean 'fetch'?"]}),
    Bad("unknown_dependency_lists_known", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: b, tool: split, args: {text: hi}, depends_on: [zzz]}
        """), [("unknown_dependency", "b")], says={0: ["'zzz'", "(known: a, b)"]}),
    # ------------------------------------------------------------------ self_dependency
    Bad("self_dependency_explicit", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}, depends_on: [a]}
        """), [("self_dependency", "a")], fields=["depends_on"],
        says={0: ["depends on itself"]}),
    Bad("self_dependency_by_steps_ref", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: "{{ steps.a.output }}"}}
        """), [("self_dependency", "a")], fields=["args.text"],
        says={0: ["own output"]}),
    Bad("self_dependency_by_save_as_key", y("""
        name: c
        steps:
          - {id: a, tool: split, save_as: mine, args: {text: "{{ mine }}"}}
        """), [("self_dependency", "a")], fields=["args.text"]),
    # ------------------------------------------------------------------ cycle
    Bad("cycle_two_explicit", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}, depends_on: [b]}
          - {id: b, tool: split, args: {text: hi}, depends_on: [a]}
        """), [("cycle", "a")], fields=["depends_on"], cycle=["a", "b", "a"],
        says={0: ["a -> b -> a"]}),
    Bad("cycle_three_explicit", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}, depends_on: [c]}
          - {id: b, tool: split, args: {text: hi}, depends_on: [a]}
          - {id: c, tool: split, args: {text: hi}, depends_on: [b]}
        """), [("cycle", "a")], cycle=["a", "b", "c", "a"], says={0: ["a -> b -> c -> a"]}),
    Bad("cycle_data_refs_only", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: "{{ steps.b.output[0] }}"}}
          - {id: b, tool: split, args: {text: "{{ steps.a.output[0] }}"}}
        """), [("cycle", "a")], cycle=["a", "b", "a"], says={0: ["a -> b -> a"]}),
    Bad("cycle_save_as_keys_and_when", y("""
        name: c
        steps:
          - {id: a, tool: split, save_as: a_out, args: {text: "{{ b_out[0] }}"}}
          - {id: b, tool: split, save_as: b_out, args: {text: x}, when: "a_out == ['x']"}
        """), [("cycle", "a")], cycle=["a", "b", "a"]),
    Bad("cycle_memory_ref_three_nodes", y("""
        name: c
        steps:
          - {id: a, tool: split, save_as: first, args: {text: "{{ memory.third[0] }}"}}
          - {id: b, tool: split, save_as: second, args: {text: "{{ memory.first[0] }}"}}
          - {id: c, tool: split, save_as: third, args: {text: "{{ memory.second[0] }}"}}
        """), [("cycle", "a")], cycle=["a", "b", "c", "a"]),
    Bad("cycle_mixed_explicit_and_data", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: b, tool: split, args: {text: "{{ steps.c.output[0] }}"}}
          - {id: c, tool: split, args: {text: "{{ steps.d.output[0] }}"}}
          - {id: d, tool: split, args: {text: hi}, depends_on: [b, a]}
        """), [("cycle", "b")], cycle=["b", "d", "c", "b"], says={0: ["b -> d -> c -> b"]}),
    # ------------------------------------------------------------------ unknown_tool
    Bad("unknown_tool_did_you_mean", y("""
        name: c
        steps:
          - {id: a, tool: splt, args: {text: hi}}
        """), [("unknown_tool", "a")], fields=["tool"],
        says={0: ["'splt'", "did you mean 'split'?"]}),
    Bad("unknown_tool_lists_known", y("""
        name: c
        steps:
          - {id: a, tool: frobnicate}
        """), [("unknown_tool", "a")],
        says={0: ["(known: create_records, delete_records, estimate, split)"]}),
    Bad("unknown_subchain", y("""
        name: c
        steps:
          - {id: a, tool: "chain:subb", args: {text: hi}}
        """), [("unknown_tool", "a")], fields=["tool"],
        says={0: ["sub-chain 'subb'", "did you mean 'sub'?", "add_chain"]}),
    Bad("unknown_rollback_tool", y("""
        name: c
        steps:
          - id: a
            tool: create_records
            args: {table_id: t, rows: []}
            rollback: {tool: delete_recs, args: {}}
        """), [("unknown_tool", "a")], fields=["rollback.tool"],
        says={0: ["rollback tool 'delete_recs'", "did you mean 'delete_records'?"]}),
    # ------------------------------------------------------------------ unknown_reference
    Bad("ref_unknown_step", y("""
        name: c
        steps:
          - {id: fetch, tool: split, args: {text: hi}}
          - {id: b, tool: split, args: {text: "{{ steps.fetc.output[0] }}"}}
        """), [("unknown_reference", "b")], fields=["args.text"],
        says={0: ["no step 'fetc'", "did you mean 'fetch'?"]}),
    Bad("ref_unknown_memory_key", y("""
        name: c
        steps:
          - {id: a, tool: split, save_as: row, args: {text: hi}}
          - {id: b, tool: split, args: {text: "{{ memory.rows[0] }}"}}
        """), [("unknown_reference", "b")],
        says={0: ["'rows'", "memory key", "did you mean 'row'?"]}),
    Bad("ref_unknown_bare_key", y("""
        name: c
        steps:
          - {id: a, tool: split, save_as: total, args: {text: hi}}
          - {id: b, tool: split, args: {text: "sum: {{ totl }}"}}
        """), [("unknown_reference", "b")],
        says={0: ["'totl'", "did you mean 'total'?"]}),
    Bad("ref_missing_context_key", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: "{{ context.usr }}"}}
        """), [("unknown_reference", "a")], context={"user": "ann"}, fields=["args.text"],
        says={0: ["context has no key 'usr'", "did you mean 'user'?"]}),
    Bad("ref_output_outside_rollback", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: "{{ output.ids }}"}}
        """), [("unknown_reference", "a")], says={0: ["only available in rollback args"]}),
    Bad("ref_input_in_when", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}, when: "input.text == 'x'"}
        """), [("unknown_reference", "a")], fields=["when"],
        says={0: ["'input' is only available in rollback args"]}),
    Bad("ref_unknown_step_in_when", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}, when: "{{ steps.nope.output }} != []"}
        """), [("unknown_reference", "a")], fields=["when"], says={0: ["no step 'nope'"]}),
    Bad("ref_unknown_step_in_rollback_args", y("""
        name: c
        steps:
          - id: a
            tool: create_records
            args: {table_id: t, rows: []}
            rollback:
              tool: delete_records
              args: {table_id: t, ids: "{{ steps.zz.output }}"}
        """), [("unknown_reference", "a")], fields=["rollback.args.ids"]),
    # ------------------------------------------------------------------ duplicate_save_as
    Bad("duplicate_save_as", y("""
        name: c
        steps:
          - {id: a, tool: split, save_as: words, args: {text: hi}}
          - {id: b, tool: split, save_as: words, args: {text: ho}}
        """), [("duplicate_save_as", "b")], fields=["save_as"],
        says={0: ["'words'", "already used by step 'a'"]}),
    # ------------------------------------------------------------------ invalid_args
    Bad("args_wrong_literal_type", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: 3}}
        """), [("invalid_args", "a")], fields=["args.text"],
        says={0: ["text=3", "does not fit tool 'split'", "valid string"]}),
    Bad("args_wrong_item_type", y("""
        name: c
        steps:
          - {id: a, tool: estimate, args: {tasks: [1, 2]}}
        """), [("invalid_args", "a")], fields=["args.tasks"]),
    Bad("args_unknown_did_you_mean", y("""
        name: c
        steps:
          - {id: a, tool: estimate, args: {tasks: [x], hour_per_task: 2}}
        """), [("invalid_args", "a")], fields=["args.hour_per_task"],
        says={0: ["no parameter 'hour_per_task'", "did you mean 'hours_per_task'?"]}),
    Bad("args_missing_required", y("""
        name: c
        steps:
          - {id: a, tool: estimate, args: {hours_per_task: 2}}
        """), [("invalid_args", "a")], fields=["args.tasks"],
        says={0: ["missing required arg 'tasks'"]}),
    Bad("args_wrong_type_and_missing", y("""
        name: c
        steps:
          - {id: a, tool: create_records, args: {table_id: 7}}
        """), [("invalid_args", "a"), ("invalid_args", "a")],
        fields=["args.table_id", "args.rows"]),
    Bad("rollback_args_wrong_type_and_unknown", y("""
        name: c
        steps:
          - id: a
            tool: create_records
            args: {table_id: t, rows: [{x: 1}]}
            rollback:
              tool: delete_records
              args: {table_id: 5, ids: "{{ output.ids }}", extra: 1}
        """), [("invalid_args", "a"), ("invalid_args", "a")],
        fields=["rollback.args.table_id", "rollback.args.extra"]),
    Bad("rollback_args_missing_required", y("""
        name: c
        steps:
          - id: a
            tool: create_records
            args: {table_id: t, rows: []}
            rollback: {tool: delete_records, args: {table_id: "{{ input.table_id }}"}}
        """), [("invalid_args", "a")], fields=["rollback.args.ids"]),
    Bad("subchain_missing_context_arg", y("""
        name: c
        steps:
          - {id: a, tool: "chain:sub"}
        """), [("invalid_args", "a")], fields=["args.text"],
        says={0: ["sub-chain 'sub' reads context.text"]}),
    # ------------------------------------------------------------------ declared inputs
    Bad("undeclared_input_reference", y("""
        name: c
        inputs:
          user: {type: string}
        steps:
          - {id: a, tool: split, args: {text: "{{ context.usr }}"}}
        """), [("undeclared_input", "a")], fields=["args.text"], lines=[5],
        says={0: ["'usr' is not a declared input", "did you mean 'user'?", "inputs:"]}),
    Bad("undeclared_input_in_a_condition_and_the_output", y("""
        name: c
        inputs: {}
        steps:
          - {id: a, tool: split, args: {text: hi}, when: "context.go"}
        output: "{{ context.mode }}"
        """), [("undeclared_input", "a"), ("undeclared_input", None)],
        fields=["when", "output"], lines=[4, 5], says={1: ["declared: none"]}),
    Bad("missing_input_in_the_context", y("""
        name: c
        inputs:
          user: {type: string, description: who asks}
          limit: {type: integer, default: 3}
        steps:
          - {id: a, tool: split, args: {text: "{{ context.user }}"}}
        """), [("missing_input", None)], context={}, fields=["context.user"],
        says={0: ["needs input 'user' (string): who asks", "pass it in the context",
                  "or give it a default"]}),
    Bad("invalid_input_in_the_context", y("""
        name: c
        inputs:
          user: {type: string}
          mode: {enum: [fast, slow], default: fast}
        steps:
          - {id: a, tool: split, args: {text: "{{ context.user }}"}}
        """), [("invalid_input", None), ("invalid_input", None)],
        context={"user": 3, "mode": "medium"}, fields=["context.user", "context.mode"],
        says={0: ["3 (integer)", "declared as string"], 1: ["one of 'fast', 'slow'"]}),
    Bad("undeclared_key_in_the_context", y("""
        name: c
        inputs:
          user: {type: string, default: ann}
        steps:
          - {id: a, tool: split, args: {text: "{{ context.user }}"}}
        """), [("undeclared_input", None)], context={"usr": "bob"}, fields=["context.usr"],
        says={0: ["does not declare", "did you mean 'user'?"]}),
    Bad("input_default_of_the_wrong_type", y("""
        name: c
        inputs:
          n: {type: integer, default: ten}
          m: {type: integer, default: 1, required: true}
        steps: []
        """), [("invalid_field", None), ("invalid_field", None)],
        fields=["inputs.n.default", "inputs.m.required"], lines=[3, 4],
        says={0: ["'ten' (string)", "declared as integer"], 1: ["never be used"]}),
    Bad("declared_input_type_into_a_list", y("""
        name: c
        inputs:
          customer: {type: string}
        steps:
          - {id: est, tool: estimate, args: {tasks: "{{ context.customer }}"}}
        """), [("reference_type", "est")],
        says={0: ["'context.customer' is string (input 'customer')",
                  "wants 'tasks' as array of string"]}),
    Bad("output_with_a_bad_template", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
        output: {words: "{{ steps.b.output }}", n: "{{ steps.a.output"}
        """), [("bad_template", None)], fields=["output"], lines=[4]),
    Bad("output_refers_to_a_missing_step", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
        output: "{{ steps.b.output }}"
        """), [("unknown_reference", None)], fields=["output"], lines=[4],
        says={0: ["no step 'b'", "(known: a)"]}),
    # ------------------------------------------------------------------ bad_template
    Bad("template_unclosed", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: "{{ context.x "}}
        """), [("bad_template", "a")], fields=["args.text"], says={0: ["expected '}}'"]}),
    Bad("template_empty_reference", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: "x {{ }} y"}}
        """), [("bad_template", "a")], says={0: ["empty reference"]}),
    Bad("template_steps_without_output", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: b, tool: split, args: {text: "{{ steps.a }}"}}
        """), [("bad_template", "b")], says={0: ["expected steps.a.output"]}),
    Bad("template_nested_in_list", y("""
        name: c
        steps:
          - {id: a, tool: create_records, args: {table_id: t, rows: [{n: "{{ steps..output }}"}]}}
        """), [("bad_template", "a")], fields=["args.rows"]),
    Bad("template_keyword_as_reference", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: "{{ and }}"}}
        """), [("bad_template", "a")], says={0: ["'and' is a keyword"]}),
    Bad("template_in_rollback_args", y("""
        name: c
        steps:
          - id: a
            tool: create_records
            args: {table_id: t, rows: []}
            rollback: {tool: delete_records, args: {table_id: "{{ input.table_id", ids: []}}
        """), [("bad_template", "a")], fields=["rollback.args.table_id"]),
    # ------------------------------------------------------------------ bad_condition
    Bad("condition_dangling_operator", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}, when: "context.n == "}
        """), [("bad_condition", "a")], fields=["when"], says={0: ["expected a value"]}),
    Bad("condition_unbalanced_paren", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}, when: "(context.n == 1"}
        """), [("bad_condition", "a")], says={0: ["expected ')'"]}),
    Bad("condition_triple_equals", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}, when: "context.n === 1"}
        """), [("bad_condition", "a")], says={0: ["unexpected character '='"]}),
    Bad("condition_python_call", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}, when: "__import__('os').system('true')"}
        """), [("bad_condition", "a")], says={0: ["unexpected text"]}),
    # ------------------------------------------------------------------ recursive_chain
    Bad("recursive_chain_self", y("""
        name: selfie
        steps:
          - {id: a, tool: "chain:selfie"}
        """), [("recursive_chain", "a")], fields=["tool"], says={0: ["selfie -> selfie"]}),
    Bad("recursive_chain_registered_self", y("""
        name: main
        steps:
          - {id: a, tool: "chain:selfie"}
        """), [("recursive_chain", "a/z")], says={0: ["main -> selfie -> selfie"]}),
    Bad("recursive_chain_mutual", y("""
        name: main
        steps:
          - {id: a, tool: "chain:loop_a"}
        """), [("recursive_chain", "a/x/y")],
        says={0: ["main -> loop_a -> loop_b -> loop_a"]}),
    # ------------------------------------------------------------------ invalid_field (load)
    Bad("field_unknown_step_field_did_you_mean", y("""
        name: c
        steps:
          - id: a
            tool: split
            depend_on: [b]
        """), [("invalid_field", "a")], stage="load", fields=["depend_on"], lines=[5],
        says={0: ["unknown field 'depend_on'", "did you mean 'depends_on'?"]}),
    Bad("field_unknown_chain_field_did_you_mean", y("""
        name: c
        step: []
        """), [("invalid_field", None)], stage="load", fields=["step"], lines=[2],
        says={0: ["did you mean 'steps'?"]}),
    Bad("field_unknown_option_did_you_mean", y("""
        name: c
        options: {max_concurency: 2}
        """), [("invalid_field", None)], stage="load", fields=["options.max_concurency"],
        says={0: ["did you mean 'max_concurrency'?"]}),
    Bad("field_wrong_type", y("""
        name: c
        steps:
          - {id: a, tool: 3}
        """), [("invalid_field", "a")], stage="load", fields=["tool"], lines=[3],
        says={0: ["valid string", "got 3"]}),
    Bad("field_bad_id_pattern", y("""
        name: c
        steps:
          - {id: a.b, tool: split}
        """), [("invalid_field", "a.b")], stage="load", fields=["id"],
        says={0: ["'a.b'", "^[A-Za-z0-9_-]+$"]}),
    Bad("field_max_attempts_zero", y("""
        name: c
        steps:
          - id: a
            tool: split
            retry:
              max_attempts: 0
        """), [("invalid_field", "a")], stage="load", fields=["retry.max_attempts"],
        lines=[6], says={0: ["greater than or equal to 1", "got 0"]}),
    Bad("field_retry_on_permanent", y("""
        name: c
        steps:
          - {id: a, tool: split, retry: {retry_on: [permanent]}}
        """), [("invalid_field", "a")], stage="load", fields=["retry.retry_on"],
        says={0: ["never retried"]}),
    Bad("field_backoff_unknown", y("""
        name: c
        steps:
          - {id: a, tool: split, retry: {backoff: linear}}
        """), [("invalid_field", "a")], stage="load", fields=["retry.backoff"]),
    Bad("field_timeout_not_positive", y("""
        name: c
        steps:
          - {id: a, tool: split, timeout_s: 0}
        """), [("invalid_field", "a")], stage="load", fields=["timeout_s"]),
    Bad("field_rollback_not_none_or_mapping", y("""
        name: c
        steps:
          - {id: a, tool: create_records, rollback: maybe}
        """), [("invalid_field", "a")], stage="load", fields=["rollback"],
        says={0: ["rollback must be 'none' or a mapping", "'maybe'"]}),
    Bad("field_rollback_mapping_without_tool", y("""
        name: c
        steps:
          - {id: a, tool: create_records, rollback: {tol: delete_records}}
        """), [("invalid_field", "a"), ("invalid_field", "a")], stage="load",
        fields=["rollback.tool", "rollback.tol"],
        says={0: ["missing required field 'tool'"], 1: ["did you mean 'tool'?"]}),
    Bad("field_save_as_reserved", y("""
        name: c
        steps:
          - {id: a, tool: split, save_as: steps}
        """), [("invalid_field", "a")], stage="load", fields=["save_as"],
        says={0: ["reserved"]}),
    Bad("field_missing_name_and_tool", y("""
        steps:
          - {id: a}
        """), [("invalid_field", None), ("invalid_field", "a")], stage="load",
        fields=["name", "tool"],
        says={0: ["missing required field 'name'"], 1: ["missing required field 'tool'"]}),
    Bad("field_steps_not_a_list", y("""
        name: c
        steps:
          a: {tool: split}
        """), [("invalid_field", None)], stage="load", fields=["steps"],
        lines=[3],  # the line of the offending value (a block mapping starts below its key)
        says={0: ["'steps' must be a list"]}),
    Bad("field_list_instead_of_mapping", y("""
        - id: a
          tool: split
        """), [("invalid_field", None)], stage="load",
        says={0: ["a chain is a mapping", "got list"]}),
    Bad("field_step_not_a_mapping", y("""
        name: c
        steps:
          - split
        """), [("invalid_field", None)], stage="load", says={0: ["expected a mapping"]}),
    Bad("field_empty_document", "", [("invalid_field", None)], stage="load",
        says={0: ["got nothing"]}),
    Bad("field_breakpoint_on_unknown_step", y("""
        name: c
        options: {breakpoints: [fetc]}
        steps:
          - {id: fetch, tool: split, args: {text: hi}}
        """), [("invalid_field", None)], fields=["options.breakpoints"],
        says={0: ["breakpoint on unknown step 'fetc'", "did you mean 'fetch'?"]}),
    # ------------------------------------------------------------------ bad_syntax
    Bad("syntax_yaml_indentation", y("""
        name: c
        steps:
          - id: a
            tool: split
           args: {text: hi}
        """), [("bad_syntax", None)], stage="load", lines=[5], says={0: ["invalid YAML"]}),
    Bad("syntax_yaml_duplicate_key", y("""
        name: c
        steps: []
        name: d
        """), [("bad_syntax", None)], stage="load", lines=[3],
        says={0: ["duplicate key 'name'", "first at line 1"]}),
    Bad("syntax_yaml_duplicate_key_in_step", y("""
        name: c
        steps:
          - id: a
            tool: split
            tool: estimate
        """), [("bad_syntax", None)], stage="load", lines=[5],
        says={0: ["duplicate key 'tool'", "first at line 4"]}),
    Bad("syntax_yaml_unclosed_flow", 'name: c\nsteps: [{id: a, tool: split}\n',
        [("bad_syntax", None)], stage="load", lines=[3]),
    Bad("syntax_json_trailing_comma", '{\n  "name": "c",\n  "steps": [],\n}\n',
        [("bad_syntax", None)], stage="load", fmt="json", lines=[4],
        says={0: ["invalid JSON", "line 4"]}),
    Bad("syntax_json_single_quotes", "{\n  'name': 'c'\n}", [("bad_syntax", None)],
        stage="load", fmt="json", lines=[2]),
    # ------------------------------------------------------------------ JSON / dict inputs
    Bad("json_nan_literal", '{"name": "c", "steps": [{"id": "a", "tool": "split",\n'
        ' "args": {"text": NaN}}]}', [("invalid_field", None)], stage="load", fmt="json",
        fields=["steps.0.args.text"], lines=[2], says={0: ["is not a JSON number"]}),
    Bad("json_unknown_tool", json.dumps({"name": "c", "steps": [
        {"id": "a", "tool": "estimat", "args": {"tasks": []}}]}),
        [("unknown_tool", "a")], fmt="json", says={0: ["did you mean 'estimate'?"]}),
    Bad("dict_bad_fields", {"name": "bad name", "steps": [
        {"id": "a", "tool": "split", "args": "text"}, {"id": "b"}]},
        [("invalid_field", None), ("invalid_field", "a"), ("invalid_field", "b")],
        stage="load", fmt="dict", fields=["name", "args", "tool"]),
    Bad("dict_cycle", {"name": "c", "steps": [
        {"id": "x", "tool": "split", "args": {"text": "{{ steps.y.output[0] }}"}},
        {"id": "y", "tool": "split", "args": {"text": "{{ steps.x.output[0] }}"}}]},
        [("cycle", "x")], fmt="dict", cycle=["x", "y", "x"]),
    # ------------------------------------------------------------------ several at once
    Bad("several_validate_problems", y("""
        name: c
        options: {breakpoints: [nowhere]}
        steps:
          - {id: a, tool: split, save_as: out, args: {text: 3}}
          - {id: a, tool: splt, args: {text: hi}}
          - {id: b, tool: estimate, save_as: out, depends_on: [b, q], args: {taks: [x]}}
          - {id: c, tool: split, args: {text: "{{ steps.d.output[0] }} {{ nope }}"}}
          - {id: d, tool: split, args: {text: "{{ steps.c.output[0] }}"}, when: "x =="}
          - {id: e, tool: "chain:loop_a"}
        """), [  # in line order; on one line, in the order checked
            ("invalid_field", None),  # line 2: breakpoint
            ("invalid_args", "a"),  # line 4: text=3
            ("duplicate_step", "a"),  # line 5: the second 'a', at its own line
            ("unknown_tool", "a"),  # line 5: the second 'a'
            ("duplicate_save_as", "b"),  # line 6
            ("self_dependency", "b"),
            ("unknown_dependency", "b"),
            ("invalid_args", "b"),  # taks: unknown
            ("invalid_args", "b"),  # tasks: missing
            ("unknown_reference", "c"),  # line 7: nope
            ("cycle", "c"),
            ("bad_condition", "d"),  # line 8
            ("recursive_chain", "e/x/y"),  # line 9
        ], cycle=["c", "d", "c"]),
    # ------------------------------------------------------------------ bad_for_each
    Bad("for_each_not_one_whole_reference", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: b, tool: split, for_each: "items: {{ steps.a.output }}", args: {text: x}}
        """), [("bad_for_each", "b")], fields=["for_each"], lines=[4],
        says={0: ["must be one whole reference to a list", "steps.split.output"]}),
    Bad("for_each_as_collides_with_a_root_index_or_memory_key", y("""
        name: c
        steps:
          - {id: a, tool: split, save_as: words, args: {text: hi}}
          - {id: b, tool: split, for_each: "{{ words }}", as: steps, args: {text: x}}
          - {id: c, tool: split, for_each: "{{ words }}", as: index, args: {text: x}}
          - {id: d, tool: split, for_each: "{{ words }}", as: words, args: {text: x}}
        """), [("bad_for_each", "b"), ("bad_for_each", "c"), ("bad_for_each", "d")],
        fields=["as", "as", "as"],
        says={0: ["'steps' collides with a reference root"], 1: ["position"],
              2: ["memory key step 'a' saves"]}),
    Bad("item_and_index_outside_a_for_each_step", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: "{{ item }}"}}
          - {id: b, tool: split, args: {text: "{{ index }}"}, when: "item.x == 1"}
        """), [("unknown_reference", "a"), ("unknown_reference", "b"),
               ("unknown_reference", "b")], fields=["args.text", "args.text", "when"],
        says={0: ["only bound in the args and when of a for_each step"]}),
    Bad("for_each_source_typed_as_something_other_than_a_list", y("""
        name: c
        inputs: {title: {type: string}}
        steps:
          - {id: a, tool: estimate, args: {tasks: [x]}}
          - {id: b, tool: split, for_each: "{{ steps.a.output }}", args: {text: hi}}
          - {id: c, tool: split, for_each: "{{ context.title }}", args: {text: "{{ item }}"}}
        """), [("reference_type", "b"), ("reference_type", "c")], fields=["for_each"] * 2,
        says={0: ["is object (the output of 'estimate'), not a list"],
              1: ["is string (input 'title'), not a list"]}),
    Bad("for_each_item_typed_against_the_parameter_it_feeds", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: b, tool: estimate, for_each: "{{ steps.a.output }}", args: {tasks: "{{ item }}"}}
          - {id: c, tool: split, for_each: "{{ steps.b.output }}", args: {text: "{{ item }}"}}
        """), [("reference_type", "b"), ("reference_type", "c")],
        fields=["args.tasks", "args.text"],
        says={0: ["'item' is string (an item of the output of 'split')", "array of string"],
              1: ["'item' is object (an item of the output of 'estimate')"]}),
    Bad("as_and_max_concurrency_without_for_each", y("""
        name: c
        steps:
          - {id: a, tool: split, as: row, max_concurrency: 2, args: {text: hi}}
        """), [("bad_for_each", "a"), ("bad_for_each", "a")],
        fields=["as", "max_concurrency"], says={0: ["only meaningful with 'for_each'"]}),
    Bad("for_each_over_its_own_item_and_an_unknown_step", y("""
        name: c
        steps:
          - {id: a, tool: split, for_each: "{{ item }}", args: {text: "{{ item }}"}}
          - {id: b, tool: split, for_each: "{{ steps.nope.output }}", args: {text: "{{ item }}"}}
        """), [("unknown_reference", "a"), ("unknown_reference", "b")],
        fields=["for_each", "for_each"], says={0: ["only bound in the args and when"]}),
    Bad("several_load_problems", y("""
        name: c
        colour: red
        steps:
          - {id: "a b", tool: split}
          - {id: ok, tool: split, retry: {max_attempts: 0}, timeout_s: -1}
          - {id: z, tool: split, rollback: sometimes, when: ""}
        """), [
            ("invalid_field", None),
            ("invalid_field", "a b"),
            ("invalid_field", "ok"),
            ("invalid_field", "ok"),
            ("invalid_field", "z"),
            ("invalid_field", "z"),
        ], stage="load", fields=["colour", "id", "retry.max_attempts", "timeout_s", "when",
                                 "rollback"], lines=[2, 4, 5, 5, 6, 6]),
]


def _load(case: Bad) -> Chain:
    if case.fmt == "yaml":
        assert isinstance(case.plan, str)
        return Chain.from_yaml(case.plan)
    if case.fmt == "json":
        assert isinstance(case.plan, str)
        return Chain.from_json(case.plan)
    return Chain.from_dict(case.plan)


def _raise(case: Bad, toolbox: Toolbox) -> PlanError:
    if case.stage == "load":
        with pytest.raises(PlanError) as info:
            _load(case)
    else:
        chain = _load(case)  # must load: the problem is only found by validate
        with pytest.raises(PlanError) as info:
            chain.validate(toolbox, context=case.context)
        # problems() reports the same list without raising
        assert chain.problems(toolbox, context=case.context) == info.value.problems
    return info.value


def test_the_table_is_big_and_covers_every_code() -> None:
    assert len(BAD) >= 45
    assert len({c.id for c in BAD}) == len(BAD)
    covered = {code for c in BAD for code, _ in c.problems}
    assert covered == set(PROBLEM_CODES)


@pytest.mark.parametrize("case", BAD, ids=[c.id for c in BAD])
def test_invalid_plan(case: Bad, toolbox: Toolbox) -> None:
    err = _raise(case, toolbox)
    assert [(p.code, p.step_id) for p in err.problems] == case.problems
    assert err.codes == [code for code, _ in case.problems]
    if case.fields is not None:
        assert [p.field for p in err.problems] == case.fields
    if case.lines is not None:
        assert [p.line for p in err.problems] == case.lines
    for index, words in case.says.items():
        for word in words:
            assert word in err.problems[index].message, (word, err.problems[index].message)
    if case.cycle is not None:
        assert type(err) is CycleError
        assert err.cycle == case.cycle
        assert " -> ".join(case.cycle) in str(err)
    else:
        assert type(err) is PlanError
    # the rendered error names every problem
    text = str(err)
    assert f"has {len(case.problems)} problem" in text
    for p in err.problems:
        assert f"[{p.code}]" in text


def test_bad_syntax_message_has_line_and_column() -> None:
    with pytest.raises(PlanError) as info:
        Chain.from_yaml("name: c\nsteps:\n  - id: a\n    tool: split\n   args: {}\n")
    (p,) = info.value.problems
    assert (p.code, p.line, p.column) == ("bad_syntax", 5, 4)
    assert "(line 5, column 4)" in p.message
    assert "line 5" in str(info.value)


def test_plan_error_carries_chain_name(toolbox: Toolbox) -> None:
    chain = Chain.from_yaml("name: my-chain\nsteps:\n  - {id: a, tool: nope}\n")
    with pytest.raises(PlanError) as info:
        chain.validate(toolbox)
    assert info.value.chain_name == "my-chain"
    assert str(info.value).startswith("chain 'my-chain' has 1 problem:")


def test_context_is_only_checked_when_given(toolbox: Toolbox) -> None:
    chain = Chain.from_yaml(
        "name: c\nsteps:\n  - {id: a, tool: split, args: {text: '{{ context.who }}'}}\n"
    )
    assert chain.validate(toolbox) is chain
    assert chain.validate(toolbox, context={"who": "me"}) is chain
    with pytest.raises(PlanError) as info:
        chain.validate(toolbox, context={})
    assert info.value.codes == ["unknown_reference"]


def test_without_toolbox_only_structure_is_checked() -> None:
    chain = Chain.from_yaml(y("""
        name: c
        steps:
          - {id: a, tool: no_such_tool, args: {whatever: 1}}
          - {id: b, tool: "chain:unregistered", depends_on: [a]}
        """))
    assert chain.validate() is chain
    broken = Chain.from_yaml(y("""
        name: c
        steps:
          - {id: a, tool: no_such_tool, depends_on: [a]}
        """))
    with pytest.raises(PlanError) as info:
        broken.validate()
    assert info.value.codes == ["self_dependency"]


def test_dependencies_raises_plan_error_on_bad_template() -> None:
    chain = Chain.from_yaml(y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: "{{ }}"}}
          - {id: b, tool: split, args: {text: hi}, when: "a =="}
        """))
    with pytest.raises(PlanError) as info:
        chain.dependencies()
    assert [(p.code, p.step_id, p.field) for p in info.value.problems] == [
        ("bad_template", "a", "args.text"),
        ("bad_condition", "b", "when"),
    ]


# ============================================================================ valid plans


@dataclass(frozen=True)
class Good:
    id: str
    plan: str
    deps: dict[str, set[str]]
    context: dict[str, Any] | None = None


GOOD: list[Good] = [
    Good("independent", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: b, tool: split, args: {text: ho}}
        """), {"a": set(), "b": set()}),
    Good("explicit_only", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: b, tool: split, args: {text: ho}, depends_on: [a]}
          - {id: c, tool: split, args: {text: ho}, depends_on: [a, b]}
        """), {"a": set(), "b": {"a"}, "c": {"a", "b"}}),
    Good("data_from_steps_ref_with_path", y("""
        name: c
        steps:
          - {id: fetch-data, tool: split, args: {text: hi}}
          - {id: est, tool: estimate, args: {tasks: "{{ steps.fetch-data.output }}"}}
          - {id: first, tool: split, args: {text: "{{ steps.fetch-data.output[0] }}"}}
        """), {"fetch-data": set(), "est": {"fetch-data"}, "first": {"fetch-data"}}),
    Good("data_from_memory_and_bare_keys", y("""
        name: c
        steps:
          - {id: a, tool: split, save_as: words, args: {text: hi}}
          - {id: b, tool: estimate, save_as: plan, args: {tasks: "{{ memory.words }}"}}
          - {id: c, tool: split, args: {text: "{{ plan.hours }}"}}
        """), {"a": set(), "b": {"a"}, "c": {"b"}}),
    Good("nested_dict_and_list_args", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: b, tool: split, save_as: more, args: {text: ho}}
          - id: c
            tool: create_records
            args:
              table_id: t
              rows:
                - {name: "{{ steps.a.output[0] }}", n: 1}
                - {tags: [x, "{{ more[1] }}"]}
        """), {"a": set(), "b": set(), "c": {"a", "b"}}),
    Good("text_interpolation", y("""
        name: c
        steps:
          - {id: a, tool: split, save_as: who, args: {text: hi}}
          - {id: b, tool: split, args: {text: ho}}
          - {id: c, tool: split, args: {text: "Hi {{ who[0] }}, see {{ steps.b.output }}!"}}
        """), {"a": set(), "b": set(), "c": {"a", "b"}}),
    Good("when_bare_braced_and_steps", y("""
        name: c
        steps:
          - {id: a, tool: estimate, save_as: est, args: {tasks: [x]}}
          - {id: b, tool: split, args: {text: hi}}
          - {id: c, tool: split, args: {text: hi}, when: "est.hours > 3"}
          - id: d
            tool: split
            args: {text: hi}
            when: "{{ est.hours }} <= 3 and steps.b.output != []"
        """), {"a": set(), "b": set(), "c": {"a"}, "d": {"a", "b"}}),
    Good("explicit_and_data_same_source_once", y("""
        name: c
        steps:
          - {id: a, tool: split, save_as: w, args: {text: hi}}
          - id: b
            tool: split
            depends_on: [a, a]
            args: {text: "{{ steps.a.output[0] }}{{ w[1] }}"}
        """), {"a": set(), "b": {"a"}}),
    Good("context_refs_make_no_dependency", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: "{{ context.text }}"}, when: "context.go"}
        """), {"a": set()}, context={"text": "a b", "go": True}),
    Good("forward_reference_is_a_dependency", y("""
        name: c
        steps:
          - {id: late, tool: split, args: {text: "{{ steps.early.output[0] }}"}}
          - {id: early, tool: split, args: {text: hi}}
        """), {"late": {"early"}, "early": set()}),
    Good("rollback_refs_are_not_dependencies", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: t}}
          - id: b
            tool: create_records
            args: {table_id: t, rows: []}
            rollback:
              tool: delete_records
              args: {table_id: "{{ input.table_id }}", ids: "{{ output.ids }}"}
          - id: c
            tool: create_records
            args: {table_id: t, rows: []}
            rollback: none
        """), {"a": set(), "b": set(), "c": set()}),
    # a reference whose type the output schema does not tell (a field of a plain dict) and a
    # template inside a literal are only known at run time
    Good("templated_args_of_unknown_type_pass", y("""
        name: c
        steps:
          - {id: a, tool: estimate, args: {tasks: [x]}}
          - {id: b, tool: split, args: {text: "{{ steps.a.output.hours }}"}}
          - id: c
            tool: estimate
            args: {tasks: ["{{ steps.a.output.hours }}"], hours_per_task: 2}
        """), {"a": set(), "b": {"a"}, "c": {"a"}}),
    Good("subchain_with_its_context_arg", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: b, tool: "chain:sub", args: {text: "{{ steps.a.output[0] }}"}}
        """), {"a": set(), "b": {"a"}}),
    Good("for_each_deps_come_from_the_list_and_the_args_not_the_item", y("""
        name: c
        steps:
          - {id: a, tool: split, args: {text: hi}}
          - {id: b, tool: split, save_as: item2, args: {text: ho}}
          - id: c
            tool: split
            for_each: "{{ steps.a.output }}"
            as: word
            max_concurrency: 2
            args: {text: "{{ word }} {{ index }} {{ item2[0] }}"}
            when: "word != 'x' and index < 3"
          - {id: d, tool: estimate, args: {tasks: "{{ steps.c.output[0] }}"}}
        """), {"a": set(), "b": set(), "c": {"a", "b"}, "d": {"c"}}),
    Good("diamond_with_every_option", y("""
        name: diamond
        description: every optional field set
        options: {max_concurrency: 2, mode: sequential, breakpoints: [d], pools: {llm: 1}}
        steps:
          - {id: a, tool: split, args: {text: hi}, retry: {max_attempts: 3, backoff: exponential}}
          - {id: b, tool: split, args: {text: "{{ steps.a.output[0] }}"}, timeout_s: 2.5}
          - {id: c, tool: split, args: {text: "{{ steps.a.output[1] }}"}, confirm: true}
          - id: d
            tool: create_records
            description: join
            args: {table_id: t, rows: [{b: "{{ steps.b.output }}", c: "{{ steps.c.output }}"}]}
            save_as: created
            when: "not (steps.b.output == [] or 'x' in steps.c.output)"
        """), {"a": set(), "b": {"a"}, "c": {"a"}, "d": {"b", "c"}}),
]


@pytest.mark.parametrize("case", GOOD, ids=[c.id for c in GOOD])
def test_valid_plan(case: Good, toolbox: Toolbox) -> None:
    chain = Chain.from_yaml(case.plan)
    assert chain.validate(toolbox, context=case.context) is chain
    assert chain.problems(toolbox, context=case.context) == []
    assert chain.dependencies() == case.deps
    assert list(chain.dependencies()) == chain.step_ids  # keyed in declaration order


# ============================================================================ hostile inputs


def _self_containing() -> dict[str, Any]:
    data: dict[str, Any] = {"name": "c", "steps": []}
    data["description"] = data
    return data


def _deep_args(depth: int) -> dict[str, Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return {"name": "c", "steps": [{"id": "a", "tool": "split", "args": {"text": value}}]}


@pytest.mark.parametrize(
    ("load", "code", "words"),
    [
        # aliases are refused before anything walks the data (see test_yaml_loader.py)
        (lambda: Chain.from_yaml("name: c\nsteps: &a [*a]\n"), "bad_syntax",
         "alias *a at line 2"),
        (lambda: Chain.from_yaml("&a {name: c, x: *a}"), "bad_syntax", "alias *a at line 1"),
        (lambda: Chain.from_dict(_self_containing()), "invalid_field", "contains itself"),
        (lambda: Chain.from_dict(_deep_args(3000)), "invalid_field", "nested too deeply"),
        (lambda: Chain.from_json('{"name": "c", "x": ' + "1" * 5000 + "}"), "bad_syntax",
         "invalid JSON"),
        (lambda: Chain.from_yaml("name: c\nx: " + "1" * 5000), "bad_syntax", "invalid YAML"),
        (lambda: Chain.from_yaml('name: "\\U99999999"'), "bad_syntax", "invalid YAML"),
        (lambda: Chain.from_yaml('name: "\\U00110000"'), "bad_syntax", "invalid YAML"),
        (lambda: Chain.from_json("[" * 100_000 + "]" * 100_000), "bad_syntax",
         "nested too deeply"),
        (lambda: Chain.from_yaml("name: !!python/object:os.system x"), "bad_syntax",
         "could not determine a constructor"),
        (lambda: Chain.from_yaml(b"name: c"), "bad_syntax", "expected plan text (str)"),
        (lambda: Chain.from_dict({1: 2, None: 3}), "invalid_field", ""),
    ],
    ids=["yaml-alias-to-itself", "yaml-recursive-mapping", "dict-containing-itself",
         "deep-args", "json-huge-int", "yaml-huge-int", "yaml-escape-overflow",
         "yaml-escape-out-of-range", "json-deep", "yaml-python-tag",
         "bytes", "non-string-keys"],
)
def test_hostile_input_is_a_plan_error(load: Any, code: str, words: str) -> None:
    with pytest.raises(PlanError) as info:
        load()
    assert info.value.codes[0] == code
    assert words in info.value.problems[0].message


@pytest.mark.timeout(10)
def test_shared_values_in_python_data_cannot_blow_up() -> None:
    # the YAML alias bomb, built in Python: each list holds the previous one 9 times
    value: Any = ["x"] * 9
    for _ in range(8):
        value = [value] * 9
    with pytest.raises(PlanError) as info:
        Chain.from_dict({"name": "c", "steps": [], "description": value})
    assert info.value.codes == ["invalid_field"]
    assert info.value.problems[0].message == (
        "plan data holds 435848053 values counting each shared value wherever it appears; "
        "the limit is 2000000")
    # sharing within the limit is fine: the same args for two steps
    args = {"text": "hi"}
    chain = Chain.from_dict({"name": "c", "steps": [
        {"id": "a", "tool": "split", "args": args}, {"id": "b", "tool": "split", "args": args}]})
    assert chain.step("a").args == chain.step("b").args == args


def test_deep_condition_is_a_problem_not_a_crash(toolbox: Toolbox) -> None:
    chain = Chain.from_dict({"name": "c", "steps": [
        {"id": "a", "tool": "split", "args": {"text": "x"}, "when": "(" * 500 + "1" + ")" * 500}
    ]})
    with pytest.raises(PlanError) as info:
        chain.validate(toolbox)
    assert [(p.code, p.step_id) for p in info.value.problems] == [("bad_condition", "a")]
    assert "nested too deeply" in info.value.problems[0].message


@pytest.mark.parametrize("text", ["\x85", "a\x85b", "a\n\x85", "\u2028 \u2029", "\ufeff",
                                  "trailing ", " \n", "x\r\ny", "yes", "1e3", "null", "~",
                                  "2024-01-01", "{{ not a ref", "- a", ": b", "#c"])
def test_odd_strings_round_trip_through_yaml(text: str) -> None:
    chain = Chain.from_dict({"name": "c", "description": text, "steps": [
        {"id": "a", "tool": "t", "description": text, "args": {text: [text, {text: text}]}}]})
    assert Chain.from_yaml(chain.to_yaml()) == chain
    assert Chain.from_json(chain.to_json()) == chain


def test_a_tools_default_compensation_is_validated_like_a_step_rollback() -> None:
    from chainlab import Chain, PlanError, Toolbox

    tb = Toolbox()

    @tb.tool(side_effects=True, compensate=("undo", {"idz": "{{ output.ids }}"}))
    def make(n: int) -> dict:
        return {"ids": [n]}

    @tb.tool(side_effects=True, idempotent=True)
    def undo(ids: list[int]) -> None: ...

    chain = Chain.from_dict({"name": "c", "steps": [{"id": "m", "tool": "make", "args": {"n": 1}}]})
    with pytest.raises(PlanError) as err:
        chain.validate(tb)
    assert [(p.code, p.step_id, p.field) for p in err.value.problems] == [
        ("invalid_args", "m", "rollback.args.idz"), ("invalid_args", "m", "rollback.args.ids")]


@pytest.mark.parametrize("key", ["none", "not", "and", "True", "null", "in"])
def test_save_as_may_not_be_a_word_of_the_condition_grammar(key: str) -> None:
    from chainlab import Chain, PlanError

    with pytest.raises(PlanError) as err:
        Chain.from_dict({"name": "c", "steps": [{"id": "a", "tool": "t", "save_as": key}]})
    assert err.value.codes == ["invalid_field"]


def test_validate_points_problems_at_lines_of_the_loaded_text() -> None:
    from chainlab import Chain, PlanError, Toolbox

    tb = Toolbox()

    @tb.tool
    def f(x: int) -> int:
        return x

    text = (
        "name: c\n"
        "steps:\n"
        "  - id: a\n"
        "    tool: f\n"
        "    args: {x: 1}\n"
        "  - id: b\n"
        "    tool: g\n"
        "    args:\n"
        "      x: '{{ steps.zz.output }}'\n"
    )
    with pytest.raises(PlanError) as err:
        Chain.from_yaml(text).validate(tb)
    assert [(p.code, p.step_id, p.line) for p in err.value.problems] == [
        ("unknown_tool", "b", 7), ("unknown_reference", "b", 9)]  # in line order
    # a chain built in Python has no text to point into
    with pytest.raises(PlanError) as err:
        Chain.from_dict({"name": "c", "steps": [{"id": "b", "tool": "g"}]}).validate(tb)
    assert [p.line for p in err.value.problems] == [None]
    # loading from text does not change equality
    assert Chain.from_yaml(text) == Chain.from_dict(Chain.from_yaml(text).to_dict())
