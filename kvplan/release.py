"""The one reading of an engine release as the engines spell one (release_key): below every
layer that compares releases (kvplan.inputs.kernel_tables picks its tables' release by it,
kvplan.engines.releases builds every engine's release rules on it)."""

import re

# a release as the engines spell one: an optional v, major.minor, a patch, a pre-release and a
# post-release or a fourth part (vLLM's hotfix 0.10.1.1, ordered as a post-release), a dev tag
# and a local tail ('0.5.3rc0', '0.6.6.post1', '0.19.1+cu129'), in any
# case; a third part that is no patch ('0.5.x', '0.5.-1', '0.5.99999') is no release: the patch
# picks rules, so it is never read as the bare minor. ASCII digits only (int() also takes '٢٤',
# ' 24' and '2_4'), and few (int() of 5,000 digits raises)
_RELEASE = re.compile(
    r"v?([0-9]{1,4})\.([0-9]{1,4})"
    r"(?:\.([0-9]{1,4})(?:\.([0-9]{1,4})|(?:(rc|a|b)[0-9]{1,4})?(?:\.post([0-9]{1,4}))?))?"
    r"(?:\.?(dev)[0-9]{0,8})?(?:\+[0-9a-z.]{1,20})?"
)
NEWEST = 1 << 20  # a bare release ('0.4'): its line's newest patch


def release_key(version: str) -> tuple[int, int, int, int] | None:
    """'0.4.9.post5' -> (0, 4, 9, 5), ordered as the releases came ('0.5.3rc0' before 0.5.3,
    0.4.9 before 0.4.9.post1); a release given without its patch number ('0.4') stands for its
    line's newest (NEWEST). None: not a release (refused where the version is read). The one
    reading of a release: release_parts, older_than and every engine's release rules use it."""
    match = _RELEASE.fullmatch(str(version).strip().lower())
    if match is None:
        return None
    major, minor, patch, hotfix, pre, post, dev = match.groups()
    if patch is None:
        return int(major), int(minor), NEWEST, NEWEST
    if hotfix is not None:  # '0.10.1.1': a fourth part, ordered as a post-release of its patch
        post = hotfix
    return int(major), int(minor), int(patch), -1 if pre or dev else int(post or 0)


def release_line(version: str) -> tuple[int, int] | None:
    """The major.minor a version string opens with, whether or not the rest spells a release
    ('0.6.x' -> (0, 6), where release_key is None): the grammar's opening, only to name the
    line in a refusal."""
    match = _RELEASE.match(str(version).strip().lower())
    return None if match is None else (int(match[1]), int(match[2]))
