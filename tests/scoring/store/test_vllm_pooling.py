"""The vLLM form of an export, served by `bench.pooling_server` as vLLM at commit 055e47c of
vllm-project/vllm serves it (the files it mirrors are named in that module's docstring):
Stepwise's scores come back through HTTP, and what that vLLM refuses is refused the same way."""
import json
import re
import urllib.error
import urllib.request

import pytest
import torch

from bench.pooling_server import PoolingModel, ServeRefused, make_server
from bench.serving import HTTPError
from scoring.core import prm, step_marker
from scoring.core.model_files import ModelFormatError
from scoring.store.checkpoint_export import export_checkpoint
from scoring.store.model_card import vllm_pooler_config
from scoring.store.remote_scorer import RemoteConfig, RemotePRM
from tests.conftest import TEST_DATA
from tests.scoring.store.test_checkpoint_export import head_version

REAL_ITEMS = step_marker.boundary_texts(TEST_DATA / "model-responses")[:12]  # real model responses, in steps


def served_line(card: str) -> dict:
    """The `vllm serve` line of a card: its --pooler-config and --tokenizer."""
    line = re.search(r"```bash\n(vllm serve .*?)\n```", card, re.S).group(1).replace("\\\n", " ")
    return {"pooler": json.loads(re.search(r"--pooler-config '(.*?)'", line).group(1)),
            "tokenizer": re.search(r"--tokenizer (\S+)", line).group(1)}


@pytest.fixture(scope="module", params=[1, None], ids=["intermediate-layer", "last-layer"])
def exported(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vllm")
    version = head_version(tmp, layer=request.param)
    return version, export_checkpoint(version, tmp / "out", serve_as="vllm")


@pytest.fixture(scope="module")
def served(exported):
    """The stand-in started with exactly what the card's `vllm serve` line says."""
    _, export = exported
    line = served_line((export.folder / "README.md").read_text())
    tokenizer = line["tokenizer"].replace("./this-folder", str(export.folder))
    model = PoolingModel(export.folder, served_name="stepwise-prm", pooler=line["pooler"], device="cpu",
                         tokenizer=tokenizer)
    httpd = make_server(model)
    httpd.start()
    yield httpd, line
    httpd.shutdown()
    httpd.server_close()


def post(httpd, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(f"{httpd.url}/pooling", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_real_texts_scored_through_the_vllm_form_equal_stepwise_local_scores(exported, served):
    version, export = exported
    httpd, line = served
    assert line["pooler"] == vllm_pooler_config(export.config) == {"pooling_type": "STEP",
                                                                   "step_tag_id": export.config["step_tag_id"]}
    assert json.loads((export.folder / "config.json").read_text())["architectures"] == ["Qwen2ForProcessRewardModel"]
    local = prm.load_prm(version, device="cpu", dtype=torch.float32).step_probabilities(REAL_ITEMS)
    client = RemotePRM(RemoteConfig.from_dict({"url": httpd.url, "served_model": "stepwise-prm",
                                               "separator": export.config["separator"], "positive_index": 1}))
    remote = client.step_probabilities(REAL_ITEMS)
    assert [len(steps) for steps in remote] == [len(steps) for _, steps in REAL_ITEMS]
    worst = max(abs(a.p - b.p) for xs, ys in zip(local, remote) for a, b in zip(xs, ys))
    spread = [s.p for steps in local for s in steps]
    assert max(spread) - min(spread) > 0.1 and worst <= 1e-5, worst


def test_what_that_vllm_refuses_in_a_request_is_a_400_naming_it(served):
    httpd, _ = served
    text = step_marker.whole_text(*REAL_ITEMS[0], separator=step_marker.STEP_MARKER)
    status, answer = post(httpd, {"model": "stepwise-prm", "input": [text], "task": "embed"})
    assert status == 400
    assert answer["error"]["message"] == "Unsupported task: 'embed' Supported tasks: ('token_classify',)"
    status, answer = post(httpd, {"model": "stepwise-prm", "input": [text], "dimensions": 8})
    assert status == 400 and answer["error"]["message"] == "dimensions is currently not supported"
    status, answer = post(httpd, {"model": "other", "input": [text], "task": "token_classify"})
    assert status == 404 and answer["error"]["message"] == "The model `other` does not exist."
    status, answer = post(httpd, {"model": "stepwise-prm", "input": [text]})  # task: the model's own
    assert status == 200 and len(answer["data"][0]["data"]) == len(REAL_ITEMS[0][1])


def test_without_a_step_tag_id_step_pooling_returns_every_token_as_vllm_does(exported):
    _, export = exported
    model = PoolingModel(export.folder, served_name="m", pooler={"pooling_type": "STEP"}, device="cpu",
                         tokenizer=export.folder / "tokenizer")
    text = step_marker.whole_text(*REAL_ITEMS[0], separator=step_marker.STEP_MARKER)
    _, answer = model.pool({"model": "m", "input": text, "task": "token_classify"})
    assert len(answer["data"][0]["data"]) == len(model.tokenizer(text)["input_ids"])


def test_a_causal_lm_is_converted_to_an_embedding_model_and_refuses_token_classify(tmp_path):
    step_token = export_checkpoint(head_version(tmp_path, layer=1), tmp_path / "st", as_kind="step_token")
    pooler = {"pooling_type": "STEP", "step_tag_id": step_token.config["step_tag_id"],
              "returned_token_ids": [step_token.config["good_token_id"], step_token.config["bad_token_id"]]}
    model = PoolingModel(step_token.folder, served_name="m", pooler=pooler, device="cpu")
    refusal = r"Unsupported task: 'token_classify' Supported tasks: \('embed', 'token_embed'\)"
    with pytest.raises(HTTPError, match=refusal) as refused:
        model.pool({"model": "m", "input": "a step", "task": "token_classify"})
    assert refused.value.status == 400
    with pytest.raises(ModelFormatError, match="drops a causal LM's lm_head"):
        export_checkpoint(head_version(tmp_path / "b", layer=1), tmp_path / "st-vllm", as_kind="step_token",
                          serve_as="vllm")


def test_an_architecture_or_pooler_config_that_vllm_refuses_never_starts(exported, tmp_path):
    _, export = exported
    with pytest.raises(ServeRefused, match="`normalize` was removed"):
        PoolingModel(export.folder, served_name="m", pooler={"normalize": True})
    with pytest.raises(ServeRefused, match="Extra inputs are not permitted"):
        PoolingModel(export.folder, served_name="m", pooler={"step_tag": 5})
    # The transformers form: LlamaForTokenClassification, which that vLLM does not serve with STEP pooling.
    token_classifier = export_checkpoint(head_version(tmp_path, layer=1), tmp_path / "tc")
    with pytest.raises(ServeRefused, match="LlamaForTokenClassification"):
        PoolingModel(token_classifier.folder, served_name="m")
