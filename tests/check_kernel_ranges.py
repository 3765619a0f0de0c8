#!/usr/bin/env python3
"""check_kernel_ranges.py ROOT: every Kokkos kernel in the sources counts its iterations in 64
bits. A kernel's policy must be tessera::Range (src/core/range.hpp: size_t indices), its
tessera::RangeOn<Space> for a kernel written for any execution space, or the host's own
RangePolicy for host-only loops. Kokkos' defaults count in int: an integer count
(parallel_for("x", n, f)), RangePolicy<> or RangePolicy<ExecSpace> would wrap past 2^31
elements on a GPU, and a TeamPolicy or MDRangePolicy would need its own review. Exits 1 naming
each kernel that uses another policy."""
import pathlib
import re
import sys

ALLOWED = ("Range(", "tessera::Range(", "RangeOn<", "tessera::RangeOn<",
           "Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(")
CALL = re.compile(r"\bparallel_(?:for|reduce|scan)\s*\(")


def first_args(text, start, count=2):
    """The first `count` arguments of the call whose '(' ends at start, as written."""
    args, current, depth, i = [], "", 0, start
    while i < len(text) and len(args) < count:
        ch = text[i]
        if ch == '"':  # a string literal, with its escapes
            end = i + 1
            while end < len(text) and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            current += text[i:end + 1]
            i = end + 1
            continue
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                args.append(current.strip())
                break
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(current.strip())
            current = ""
            i += 1
            continue
        current += ch
        i += 1
    return args


def main():
    root = pathlib.Path(sys.argv[1])
    bad, kernels = [], 0
    for folder in ("src", "include", "apps", "perf"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".cpp", ".hpp", ".h", ".cu"):
                continue
            text = path.read_text(errors="replace")
            for m in CALL.finditer(text):
                kernels += 1
                args = first_args(text, m.end())
                # With a label first (a string or a name), the policy is the second argument.
                policy = args[0] if args and args[0].startswith(ALLOWED) else (args[1] if len(args) > 1 else "")
                if not policy.startswith(ALLOWED):
                    line = text.count("\n", 0, m.start()) + 1
                    bad.append(f"{path.relative_to(root)}:{line}: policy {' '.join(policy.split())[:80]!r}")
            for m in re.finditer(r"RangePolicy<(?!Kokkos::DefaultHostExecutionSpace>)", text):
                if path.name != "range.hpp":
                    line = text.count("\n", 0, m.start()) + 1
                    bad.append(f"{path.relative_to(root)}:{line}: a RangePolicy other than tessera::Range")
    if kernels == 0:
        print("check_kernel_ranges.py: no kernels found; is ROOT the repository?")
        return 1
    for b in bad:
        print(b)
    if bad:
        print("use tessera::Range (src/core/range.hpp), which counts in 64 bits, for every device kernel")
        return 1
    print(f"check_kernel_ranges.py: {kernels} kernels, each with tessera::Range, RangeOn or the host's own policy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
