"""Recognising a function by what it computes: its source, reduced to a
canonical form (no docstrings, comments, annotations, decorators or layout;
the function's own name made "f"), compared with the sources whose
computation patch knows. A changed function in a new release of a model's
code no longer matches, and keeps its own code."""

import ast
import inspect
import textwrap

# Spellings of one computation in the transformers releases patch knows
# (5.17 to 5.25): the older is rewritten to the newer before comparing.
_RENAMED = {"past_key_values": "cache"}
_REWRITTEN = {
    # the first field of a base model's output is its last hidden state
    "    hidden_states = outputs[0]\n": "    hidden_states = outputs.last_hidden_state\n",
    (
        "    slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep\n"
        "    logits = self.lm_head(hidden_states[:, slice_indices, :])"
    ): (
        "    hidden_states = slice_logits_to_keep(hidden_states, logits_to_keep)\n"
        "    logits = self.lm_head(hidden_states)"
    ),
}


class _Renamer(ast.NodeTransformer):
    def visit_AnnAssign(self, node):  # x: T = v is x = v
        if node.value is None or not isinstance(node.target, ast.Name):
            return node
        return ast.copy_location(ast.Assign(targets=[node.target], value=self.visit(node.value)), node)

    def visit_Name(self, node):
        node.id = _RENAMED.get(node.id, node.id)
        return node

    def visit_arg(self, node):
        node.arg = _RENAMED.get(node.arg, node.arg)
        return node

    def visit_keyword(self, node):
        node.arg = _RENAMED.get(node.arg, node.arg)
        return self.generic_visit(node)

    def visit_Attribute(self, node):
        node.attr = _RENAMED.get(node.attr, node.attr)
        return self.generic_visit(node)


def _canonical(text):
    function = ast.parse(textwrap.dedent(text)).body[0]
    function.name = "f"
    function.decorator_list = []
    function.returns = None
    arguments = function.args
    for argument in arguments.posonlyargs + arguments.args + arguments.kwonlyargs + [arguments.vararg, arguments.kwarg]:
        if argument is not None:
            argument.annotation = None
    for node in ast.walk(function):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    canonical = ast.unparse(_Renamer().visit(function))
    for old, new in _REWRITTEN.items():
        canonical = canonical.replace(old, new)
    return canonical


_CANONICAL = {}  # code object -> its canonical source (None: no source)


def canonical_source(function):
    """The canonical source of a function, or None when it has none."""
    code = getattr(function, "__code__", None)
    if code is None:
        return None
    if code not in _CANONICAL:
        try:
            # (the code's own source: getsource of a function follows __wrapped__)
            _CANONICAL[code] = _canonical(inspect.getsource(code))
        except (OSError, TypeError, SyntaxError, IndexError):
            _CANONICAL[code] = None
    return _CANONICAL[code]


def known(*sources):
    """The canonical forms of sources written out here, for is_known."""
    return frozenset(_canonical(source) for source in sources)


def is_known(function, sources):
    """Whether `function` is, by its source, one of `sources` (from known)."""
    return function is not None and canonical_source(function) in sources


def has_hooks(module):
    """Whether module hooks would run around its forward (a replaced module
    would lose them, so it is kept)."""
    return any(
        getattr(module, name, None)
        for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    )
