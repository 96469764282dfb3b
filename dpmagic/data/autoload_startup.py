# Installed by `dpmagic autoload on`: loads the dpmagic extension in every IPython kernel of this profile.
# Remove it with `dpmagic autoload off` (or delete this file).
try:
    # get_ipython: a builtin where IPython runs start-up files, the user's namespace (an import would add a name there)
    get_ipython().run_line_magic("load_ext", "dpmagic")  # type: ignore[name-defined]  # noqa: F821
except Exception as exc:  # never break a kernel's start-up
    print(f"dpmagic autoload skipped: {exc}")
