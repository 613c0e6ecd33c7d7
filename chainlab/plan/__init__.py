"""The plan contract: pure data (stdlib + pydantic). Chains, steps, references, validation."""

from chainlab.plan.graph import Edge, dependencies, edges, find_cycle, topological_order
from chainlab.plan.refs import Ref, Template, parse_condition, parse_template
from chainlab.plan.schema import Chain, ErrorKind, RetryPolicy, Rollback, RunOptions, Step
from chainlab.plan.validate import PROBLEM_CODES, find_problems

__all__ = [
    "PROBLEM_CODES",
    "Chain",
    "Edge",
    "ErrorKind",
    "Ref",
    "RetryPolicy",
    "Rollback",
    "RunOptions",
    "Step",
    "Template",
    "dependencies",
    "edges",
    "find_cycle",
    "find_problems",
    "parse_condition",
    "parse_template",
    "topological_order",
]
