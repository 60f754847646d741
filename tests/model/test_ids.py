"""The shapes of identifiers (issue 17, item 2): one charset for job ids, Slurm's own shapes,
Kubernetes pod uids and names."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuadvisor.errors import ModelError
from gpuadvisor.model.ids import (
    MAX_JOB_ID_CHARS,
    checked_job_id,
    checked_slurm_job_id,
    job_id_problem,
    kubernetes_name_problem,
    pod_uid_problem,
    slurm_job_id_problem,
)

GOOD_JOB_IDS = [
    "1",
    "4242",
    "0102",
    "77_3",
    "77+1",
    "4294967295",
    "cluster-a:12.3",
    "job_name.v2",
    "0d5c7a4e-1f2b-4c3d-9e8f-123456789abc",
    "x" * MAX_JOB_ID_CHARS,
]
BAD_JOB_IDS = [
    "",
    "x" * (MAX_JOB_ID_CHARS + 1),
    "<!channel>",
    "<https://evil.example|click>",
    "a b",
    "a\nb",
    "77_[0-19999999]",
    "a/b",
    "1+",
    "\u0661\u0662",  # Arabic-Indic digits: str.isdigit() says yes, Slurm does not
    "\ud83d\ude00",
    "é",
    "a|b",
    "=HYPERLINK(1)",
]


@pytest.mark.parametrize("text", GOOD_JOB_IDS)
def test_good_job_ids(text: str) -> None:
    assert job_id_problem(text) is None
    assert checked_job_id(text) == text


@pytest.mark.parametrize("text", BAD_JOB_IDS)
def test_bad_job_ids_say_why(text: str) -> None:
    problem = job_id_problem(text)
    assert problem is not None
    assert len(problem) < 200  # a megabyte id is never quoted whole
    with pytest.raises(ModelError):
        checked_job_id(text)


@pytest.mark.parametrize("text", ["1", "4242", "77_3", "77+1", "4294967295", "4294967295_0"])
def test_slurm_shapes(text: str) -> None:
    assert slurm_job_id_problem(text) is None
    assert checked_slurm_job_id(text) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "4294967296",
        "1_4294967296",
        "01",
        "1_2_3",
        "1+2+3",
        "1_",
        "_1",
        "1.batch",
        "1_[1-5]",
        " 1",
        "1\n",
        "abc",
        "\u0661",
        "99999999999999999999",
    ],
)
def test_not_slurm_shapes(text: str) -> None:
    assert slurm_job_id_problem(text) is not None
    with pytest.raises(ModelError, match="Slurm"):
        checked_slurm_job_id(text)


def test_pod_uids_are_rfc_4122() -> None:
    assert pod_uid_problem("0d5c7a4e-1f2b-4c3d-9e8f-123456789abc") is None
    for bad in (
        "0D5C7A4E-1F2B-4C3D-9E8F-123456789ABC",
        "0d5c7a4e_1f2b_4c3d_9e8f_123456789abc",
        "0d5c7a4e-1f2b-4c3d-9e8f-123456789abc0",
        ".*",
        "a|b",
        "",
    ):
        assert pod_uid_problem(bad) is not None, bad


def test_kubernetes_names() -> None:
    for good in ("default", "ml-team", "trainer-0", "a.b-c", "x" * 253):
        assert kubernetes_name_problem(good) is None, good
    for bad in ("", "Default", "-a", "a-", "a/b", "a_b", "x" * 254, "<!here>"):
        assert kubernetes_name_problem(bad) is not None, bad


@given(st.text(max_size=300))
def test_every_accepted_id_is_short_ascii_without_markup(text: str) -> None:
    if job_id_problem(text) is None:
        assert 0 < len(text) <= MAX_JOB_ID_CHARS
        assert text.isascii() and text.isprintable()
        assert not set(text) & set("<>|&*\\/\"' \n\r\t`=")
    if slurm_job_id_problem(text) is None:
        assert job_id_problem(text) is None
