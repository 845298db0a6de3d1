"""§6.2 "线上的字节", table (1): the byte columns (body, tensors, safetensors header), the
"比 none 小" ratio and the upload time at 10 MB/s are arithmetic on the bytes a worker sends,
the same in every run and on every machine (the golden --quick run prints the same bytes as
the default run: sizes depend on the parameter shapes and the top-k ratio only).

So each cell is compared, row by row, with what the worker's own encoding gives for one
upload: PayloadErrorFeedback.propose and payload_to_bytes (swarm_worker.upload), counted
as swarm_worker counts them and formatted as swarm_report.print_traffic_table formats them.
The last column (trained bpc) is the claims test's (tests/test_claims.py)."""

import pytest
import torch

from conftest import ROOT, notes_section, table_cells
from lecture01.tiny_gpt import make_model
from lecture09.compress.compression import PayloadErrorFeedback, WIRE_MODES, payload_tensor_bytes, payload_to_bytes
from lecture09.lecture_model import MODEL_CONFIG
from lecture09.swarm.swarm_protocol import WorkerConfig
from lecture09.swarm.swarm_report import Link
from notes_book import LECTURE09_BOOK

pytestmark = pytest.mark.smoke

NOTES = LECTURE09_BOOK
TABLE_1_HEADER = "| 压缩 | 每次上传 body |"


def table_1_rows():
    """{mode: [body, tensors, header, vs none, upload time]} cells of table (1) in §6."""
    table = notes_section(NOTES, "## 6 ").split(TABLE_1_HEADER)[1].split("\n\n")[0]
    rows = {}
    for line in table.splitlines():
        cells = table_cells(line)
        if line.startswith("| ") and not line.startswith("|---"):
            rows[cells[0]] = cells[1:6]
    return rows


def one_upload_bytes(mode):
    """(body bytes, tensor bytes) of one upload in `mode`, as a worker encodes and counts it."""
    model = make_model(MODEL_CONFIG, seed=0)
    gen = torch.Generator().manual_seed(0)
    grads = {name: torch.randn(p.shape, generator=gen) for name, p in model.named_parameters()}
    payload = PayloadErrorFeedback().propose(grads, mode, WorkerConfig().topk_ratio)
    return len(payload_to_bytes(payload)), payload_tensor_bytes(payload)


def expected_rows():
    """The same cells from the code, formatted as print_traffic_table prints them."""
    sizes = {mode: one_upload_bytes(mode) for mode in WIRE_MODES}
    dense_body = sizes["none"][0]
    return {mode: [f"{body:,} 字节", f"{tensors:,}", f"{body - tensors:,}", f"{dense_body / body:.1f}x",
                   f"{1e3 * Link().upload_s(body):.2f} ms"]
            for mode, (body, tensors) in sizes.items()}


def test_table_1_bytes_ratio_and_upload_time_are_one_uploads():
    assert table_1_rows() == expected_rows()
