"""Build hook for baton-client: compiles baton's gRPC contracts (proto/*.proto) into the
package `baton_client._proto` with grpcio-tools, at build time, so that nothing generated
is kept in the repository and the client always matches the protos it is built from.

The protos are read from `proto/` beside this file when it exists (an sdist carries a copy
there) and otherwise from the repository's top-level `proto/`, two folders up.

The generated modules refuse a grpcio or protobuf runtime older than the generator that
made them, so the package's dependencies are read from what this build generates.
"""

import glob
import os
import re
import shutil
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
# Where the generated modules go, inside the package.
GENERATED = os.path.join("baton_client", "_proto")
# The least the hand-written layer needs, when the versions cannot be read from generated code.
FLOOR = {"grpcio": "1.59", "protobuf": "4.21"}


def proto_dir():
    """The folder holding baton's .proto files."""
    candidates = [os.path.join(HERE, "proto"), os.path.join(HERE, "..", "..", "proto")]
    for d in candidates:
        if glob.glob(os.path.join(d, "*.proto")):
            return os.path.normpath(d)
    raise SystemExit(
        "baton-client: no .proto files found in "
        + " or ".join(os.path.normpath(d) for d in candidates)
        + "; build from a checkout of the baton repository (clients/python) or from its sdist"
    )


def relative_imports(path):
    """protoc writes `import baton_pb2 as ...` (a top-level module); inside a package the
    modules must import each other relatively."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"^import (\w+_pb2) as ", r"from . import \1 as ", text, flags=re.M)
    text = re.sub(r"^from (\w+_pb2) import ", r"from .\1 import ", text, flags=re.M)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def compile_protos(out):
    """Generates the modules of every proto/*.proto into `out` (made a package)."""
    import grpc_tools
    from grpc_tools import protoc

    src = proto_dir()
    protos = sorted(glob.glob(os.path.join(src, "*.proto")))
    os.makedirs(out, exist_ok=True)
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = [
        "grpc_tools.protoc",
        "-I" + src,
        "-I" + well_known,
        "--python_out=" + out,
        "--pyi_out=" + out,
        "--grpc_python_out=" + out,
    ] + protos
    if protoc.main(args) != 0:
        raise SystemExit("baton-client: grpc_tools.protoc failed on " + ", ".join(protos))
    for path in glob.glob(os.path.join(out, "*_pb2*.py")) + glob.glob(os.path.join(out, "*_pb2*.pyi")):
        relative_imports(path)
    with open(os.path.join(out, "__init__.py"), "w", encoding="utf-8") as f:
        f.write('"""Generated at build time from baton\'s proto/*.proto by grpcio-tools; do not edit."""\n')


def generated_versions(out):
    """The least grpcio and protobuf the modules in `out` accept, where they say."""
    versions = dict(FLOOR)
    for path in glob.glob(os.path.join(out, "*_pb2_grpc.py")):
        with open(path, encoding="utf-8") as f:
            m = re.search(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'", f.read(), flags=re.M)
        if m:
            versions["grpcio"] = m.group(1)
    for path in glob.glob(os.path.join(out, "*_pb2.py")):
        with open(path, encoding="utf-8") as f:
            m = re.search(r"ValidateProtobufRuntimeVersion\(\s*\S+,\s*(\d+),\s*(\d+),\s*(\d+),", f.read())
        if m:
            versions["protobuf"] = ".".join(m.groups())
    return versions


def dependencies():
    try:
        import grpc_tools  # noqa: F401  (present where the package is built)
    except ImportError:
        versions = dict(FLOOR)
    else:
        tmp = tempfile.mkdtemp(prefix="baton-client-")
        try:
            compile_protos(tmp)
            versions = generated_versions(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return ["grpcio>=" + versions["grpcio"], "protobuf>=" + versions["protobuf"]]


class BuildPy(build_py):
    """Generates the modules along with copying the package's own files."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            # An editable install imports from src/: generate there (git ignores it).
            out = os.path.join(HERE, "src", GENERATED)
        else:
            out = os.path.join(self.build_lib, GENERATED)
        compile_protos(out)

    def get_outputs(self, include_bytecode=True):
        outputs = super().get_outputs(include_bytecode)
        if not getattr(self, "editable_mode", False):
            gen = os.path.join(self.build_lib, GENERATED)
            outputs.extend(glob.glob(os.path.join(gen, "*")))
        return outputs


class Sdist(sdist):
    """Carries a copy of the protos in the sdist, which has no repository around it."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        dest = os.path.join(base_dir, "proto")
        os.makedirs(dest, exist_ok=True)
        for p in glob.glob(os.path.join(proto_dir(), "*.proto")):
            shutil.copy2(p, dest)


setup(install_requires=dependencies(), cmdclass={"build_py": BuildPy, "sdist": Sdist})
