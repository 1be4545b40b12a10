"""python/loaderx/_native.pyi against the compiled module, so they cannot
drift: the same names at module level, the same classes with the same
methods and properties, and the same signatures (parameter names, kinds and
defaults) as the runtime's text signatures."""

import ast
import inspect
from pathlib import Path

import pytest

import loaderx
from loaderx import _native

STUB = Path(loaderx.__file__).with_name("_native.pyi")
#: Dunder methods that are part of the documented surface.
DUNDERS = {"__len__", "__iter__", "__next__", "__enter__", "__exit__", "__repr__", "__int__"}


def _tree():
    return ast.parse(STUB.read_text())


def _public(names):
    return {n for n in names if not n.startswith("_") or n in DUNDERS}


def _stub_classes(body, prefix=""):
    out = {}
    for node in body:
        if isinstance(node, ast.ClassDef):
            out[prefix + node.name] = node
            out.update(_stub_classes(node.body, prefix + node.name + "."))
    return out


def _runtime_class(qualname):
    obj = _native
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _stub_members(cls_node):
    """{name: ('method'|'property'|'attribute', node)} of a stub class."""
    out = {}
    for node in cls_node.body:
        if isinstance(node, ast.FunctionDef):
            is_prop = any(isinstance(d, ast.Name) and d.id == "property"
                          for d in node.decorator_list)
            out[node.name] = ("property" if is_prop else "method", node)
        elif isinstance(node, ast.AnnAssign):
            out[node.target.id] = ("attribute", node)
        elif isinstance(node, ast.ClassDef):
            out[node.name] = ("class", node)
    return out


def _stub_signature(fn):
    """[(name, kind, default-or-EMPTY)] of a stub function, self excluded."""
    a = fn.args
    params = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for i, (arg, default) in enumerate(zip(positional, defaults)):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        params.append((arg.arg, kind, _literal(default)))
    if a.vararg:
        params.append((a.vararg.arg, "VAR_POSITIONAL", inspect.Parameter.empty))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append((arg.arg, "KEYWORD_ONLY", _literal(default)))
    if a.kwarg:
        params.append((a.kwarg.arg, "VAR_KEYWORD", inspect.Parameter.empty))
    return params[1:] if params and params[0][0] in ("self", "cls") else params


def _literal(node):
    return inspect.Parameter.empty if node is None else ast.literal_eval(node)


def _runtime_signature(obj):
    sig = inspect.signature(obj)
    params = [(p.name, p.kind.name, p.default) for p in sig.parameters.values()]
    return params[1:] if params and params[0][0] in ("self", "$self") else params


def test_module_level_names_match():
    stub_names = set()
    for node in _tree().body:
        if isinstance(node, ast.ClassDef):
            stub_names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            stub_names.add(node.target.id)
        elif isinstance(node, ast.FunctionDef):
            stub_names.add(node.name)
    runtime = {n for n in dir(_native) if not n.startswith("_")} | {"__version__"}
    assert stub_names == runtime


CLASSES = sorted(_stub_classes(_tree().body))


@pytest.mark.parametrize("qualname", CLASSES)
def test_class_members_and_signatures_match(qualname):
    cls = _runtime_class(qualname)
    node = _stub_classes(_tree().body)[qualname]
    members = _stub_members(node)
    own = vars(cls)
    runtime_names = _public(own)
    if issubclass(cls, BaseException):
        runtime_names = set()  # only the attributes the stub declares
    stub_names = {n for n in members if n != "__init__"}
    assert stub_names == runtime_names | {n for n, (k, _) in members.items()
                                          if k == "attribute" and n not in own}, qualname
    for name, (kind, member) in members.items():
        if name == "__init__":
            assert cls.__text_signature__ is not None, f"{qualname} has no text signature"
            assert _stub_signature(member) == _runtime_signature(cls), f"{qualname}()"
        elif kind == "method":
            assert _stub_signature(member) == _runtime_signature(own[name]), \
                f"{qualname}.{name}"
        elif kind == "property":
            assert type(own[name]).__name__ == "getset_descriptor", f"{qualname}.{name}"
        elif kind == "class":
            assert isinstance(own[name], type)
        elif name in own:
            assert isinstance(own[name], cls) or not callable(own[name]), f"{qualname}.{name}"


def test_classes_without_init_in_the_stub_cannot_be_constructed():
    for qualname, node in _stub_classes(_tree().body).items():
        cls = _runtime_class(qualname)
        has_init = "__init__" in _stub_members(node)
        if issubclass(cls, BaseException):
            continue
        assert (cls.__text_signature__ is not None) == has_init, qualname


def test_the_zrecord_error_code_attribute_is_declared():
    members = _stub_members(_stub_classes(_tree().body)["ZrecordError"])
    assert members["code"][0] == "attribute"


def test_py_typed_ships_with_the_package():
    assert STUB.with_name("py.typed").is_file()
