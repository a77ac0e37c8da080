"""Run by the vLLM venv's python (tests/vllm_harness.run_inproc): one in-process vLLM.

Reads WORKDIR/job.json:
    {"model": dir, "llm": {extra LLM(...) arguments},
     "requests": [{"name", "prompt": [ids], "spec" | "regex", "max_tokens"}],
     "batches": [[names run together in one generate call], ...],
     "refuse": [spec texts to submit expecting a validation error]}
and writes WORKDIR/report.json:
    {"outputs": {name: {"tokens", "text", "finish"}}, "errors": {spec: message},
     "unpatched": message of vLLM's own validation for the first spec,
     "grammars": {class name: count}, "masks": {name: [[consumed, row words...], ...]}}
Mask rows are recorded as vLLM's engine fills them (the plugin's grammar objects).
"""

import json
import sys
from pathlib import Path

import numpy as np


def main(workdir: Path) -> None:
    job = json.loads((workdir / "job.json").read_text(encoding="utf-8"))
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams
    from vllm.v1.structured_output import backend_guidance

    llm = LLM(
        model=job["model"],
        dtype="float32",
        max_model_len=512,
        enforce_eager=True,
        seed=0,
        structured_outputs_config={"backend": "guidance"},
        **job.get("llm", {}),
    )
    report = {"outputs": {}, "errors": {}, "grammars": {}, "masks": {}}

    # The plugin has run (vLLM loads general plugins while building the engine); record
    # what the engine compiles and every row it fills.
    backend = backend_guidance.GuidanceBackend
    compile_grammar = backend.compile_grammar
    spec_names = {r["spec"]: r["name"] for r in job["requests"] if r.get("spec")}

    def recording_compile(self, request_type, grammar_spec, *args, **kwargs):
        grammar = compile_grammar(self, request_type, grammar_spec, *args, **kwargs)
        name = type(grammar).__name__
        report["grammars"][name] = report["grammars"].get(name, 0) + 1
        if (
            name == "MidwordVllmGrammar"
            and grammar_spec in spec_names
            and spec_names[grammar_spec] not in report["masks"]
        ):
            rows = report["masks"].setdefault(spec_names[grammar_spec], [])
            fill = grammar.fill_bitmask

            def recording_fill(bitmask, idx):
                fill(bitmask, idx)
                rows.append([len(grammar._states) - 1] + bitmask[idx].numpy().view(np.uint32).tolist())

            grammar.fill_bitmask = recording_fill
        return grammar

    backend.compile_grammar = recording_compile

    by_name = {r["name"]: r for r in job["requests"]}
    for batch in job.get("batches", []):
        prompts, params = [], []
        for name in batch:
            r = by_name[name]
            so = (
                StructuredOutputsParams(grammar=r["spec"])
                if r.get("spec")
                else StructuredOutputsParams(regex=r["regex"])
            )
            params.append(SamplingParams(max_tokens=r.get("max_tokens", 12), temperature=0.0, structured_outputs=so))
            prompts.append({"prompt_token_ids": r["prompt"]})
        for name, out in zip(batch, llm.generate(prompts, params, use_tqdm=False), strict=False):
            o = out.outputs[0]
            report["outputs"][name] = {"tokens": list(o.token_ids), "text": o.text, "finish": o.finish_reason}

    for spec in job.get("refuse", []):
        sp = SamplingParams(max_tokens=2, structured_outputs=StructuredOutputsParams(grammar=spec))
        try:
            llm.generate([{"prompt_token_ids": [2, 100]}], sp, use_tqdm=False)
            report["errors"][spec] = None
        except Exception as exc:  # noqa: BLE001 - the message is what the test reads
            report["errors"][spec] = f"{type(exc).__name__}: {exc}"

    # The same front end with the plugin's two wrappers taken off: vLLM's own answer.
    if job.get("unpatched"):
        from vllm.sampling_params import SamplingParams as SP

        patched = (SP._validate_structured_outputs, backend_guidance.validate_guidance_grammar)
        SP._validate_structured_outputs = patched[0].__wrapped__
        backend_guidance.validate_guidance_grammar = patched[1].__wrapped__
        sp = SamplingParams(max_tokens=2, structured_outputs=StructuredOutputsParams(grammar=job["unpatched"]))
        try:
            llm.generate([{"prompt_token_ids": [2, 100]}], sp, use_tqdm=False)
            report["unpatched"] = None
        except Exception as exc:  # noqa: BLE001
            report["unpatched"] = f"{type(exc).__name__}: {exc}"
        finally:
            SP._validate_structured_outputs, backend_guidance.validate_guidance_grammar = patched

    (workdir / "report.json").write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
