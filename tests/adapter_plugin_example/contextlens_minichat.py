"""A contextlens adapter for "mini chat" files: ``{"mini_chat": [{"role", "content"}, ...]}``.

Each assistant turn is one model request whose context is every turn before it.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from ingest.adapters import AdaptResult, Sample, TokenEstimator
from ingest.adapters import EPOCH, Builder
from ingest.errors import ContextlensError


class MiniChatAdapter:
    name = "mini-chat"
    description = 'JSON {"mini_chat": [{"role": "user" | "assistant", "content": "..."}]}'

    def sniff(self, sample: Sample) -> str | None:
        doc = sample.document
        if isinstance(doc, dict) and isinstance(doc.get("mini_chat"), list):
            return None
        return 'no "mini_chat" list'

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult:
        data = path.read_bytes()
        try:
            turns = json.loads(data)["mini_chat"]
        except (ValueError, KeyError, TypeError) as err:
            raise ContextlensError(f"{path}: not a mini-chat file ({err})") from None
        b = Builder(self.name, path, data, estimator)
        t = EPOCH
        cid = b.conversation(path.stem, t)
        model = b.participant(cid, "model", "mini model", "model", "mini", "mini-1")
        context = []
        for i, turn in enumerate(turns):
            t += dt.timedelta(seconds=1)
            role, text = turn.get("role"), str(turn.get("content", ""))
            if role == "assistant":
                run = b.run(cid, model, "mini", "mini-1", t, ended_at=t)
                b.assembly(run, included=list(context), omitted=[], recorded_input=None)
                context.append(b.message(cid, "assistant", text, t, model, model_run_id=run))
            elif role == "user":
                context.append(b.message(cid, "user", text, t, b.user_of[cid]))
            else:
                b.warn(f"{path.name} turn {i}: role {role!r} skipped")
        return b.write(out_dir)
