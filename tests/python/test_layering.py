"""The engine's layers include only downwards (docs/decisions.md, "Layers"):
core <- ir <- kernels, passes, memory <- runtime <- cache. A file that includes a layer above its own
(the op table asking the kernel registry, the pipeline including the runtime for its options)
makes the lower layer impossible to build, test or reason about without the upper one."""
import pathlib
import re

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
# layer folder -> the folders it must not include from
FORBIDDEN = {
    "core": ("ir", "kernels", "memory", "passes", "runtime", "cache"),
    "ir": ("kernels", "memory", "passes", "runtime", "cache"),
    "kernels": ("memory", "passes", "runtime", "cache"),
    "passes": ("memory", "runtime", "cache"),
    "memory": ("kernels", "passes", "runtime", "cache"),
}
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^/"]+)/', re.M)


def _violations():
    out = []
    for layer, above in FORBIDDEN.items():
        for f in sorted((SRC / layer).rglob("*")):
            if f.suffix not in (".h", ".cpp"):
                continue
            for folder in _INCLUDE.findall(f.read_text()):
                if folder in above:
                    out.append(f"{f.relative_to(SRC)} includes {folder}/")
    return out


def test_layers_include_only_downwards():
    assert _violations() == []
