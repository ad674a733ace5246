"""Public PRMs read the input their model cards build: Math-Shepherd (`f"{question} {output}"`, each
step closed by " ки", `+`/`-` logits at `ки`) and Qwen2.5-Math-PRM (its chat template and system
prompt, `<extra_0>` after each step, a two-class head). The real checkpoints cannot be had offline,
so the tests use random-weight models of their architectures (Mistral, Qwen2) and tokenizers built
to the same rules; the reference scores are the model cards' own code, run on those."""
import pytest
import torch

from bench.tiny import build_tiny_tokenizer
from scoring.core import encoding, prm
from scoring.core.model_files import ModelFormatError, write_model_config
from scoring.store.public_checkpoints import describe_checkpoint

ITEMS = [
    ("Janet's ducks lay 16 eggs per day. She eats 3. How many are left?",
     ["She eats 3, so 16 - 3 = 13 eggs are left.", "The answer is: 13"]),
    ("Solve 3x = 12.", ["Step 1: Divide both sides by 3.", "Step 2: x = 4.", "Step 3: The answer is: 4"]),
    ("Is 17 prime?", ["Yes: its only divisors are 1 and 17."]),
]
SHEPHERD_CORPUS = [
    "Janet's ducks lay 16 eggs per day. Step 1: She eats 3, so 16 - 3 = 13 eggs are left. ки\n"
    "Step 2: She sells 13 * 2 = 26 dollars of eggs. The answer is: 26 ки",
    "Step 1: x + 2 = 5 so x = 3. +\nStep 2: 3 * 3 = 9. -",
    "Solve 3x = 12. Step 1: Divide both sides by 3. ки\nStep 2: x = 4. ки",
] * 8
# Qwen2.5-Math's chat template, without its tool branches (a PRM conversation has no tools).
QWEN_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nPlease reason step by step, and put your final answer within "
    "\\\\boxed{}.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def mistral_style_tokenizer():
    """Built to the rules of Mistral's tokenizer (Math-Shepherd's): sentencepiece-style `▁` word
    starts, a newline its own token, `encode` puts the BOS first, and `ки`, `+`, `-` one token each."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("\n", behavior="isolated"),
        pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first"),
    ])
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    alphabet = [chr(code) for code in range(32, 127)] + ["\n", "к", "и", "▁"]
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=alphabet, show_progress=False)
    tokenizer.train_from_iterator(SHEPHERD_CORPUS, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tokenizer.token_to_id("<s>"))])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<unk>")


def qwen_style_tokenizer(*, chat_template: bool = True):
    """Built to the rules of Qwen2.5's tokenizer: byte-level BPE, no BOS, `<|im_start|>`,
    `<|im_end|>` and `<extra_0>` added special tokens, Qwen2.5-Math's chat template."""
    tokenizer = build_tiny_tokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<extra_0>"]})
    tokenizer.chat_template = QWEN_TEMPLATE if chat_template else None
    return tokenizer


def math_shepherd_folder(folder, *, tokenizer=None):
    """A random-weight Mistral causal LM (Math-Shepherd's architecture) with a Mistral-style tokenizer."""
    from transformers import MistralConfig, MistralForCausalLM

    tokenizer = tokenizer or mistral_style_tokenizer()
    config = MistralConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, bos_token_id=tokenizer.bos_token_id,
                           eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False)
    torch.manual_seed(5)
    MistralForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def qwen_math_prm_folder(folder, *, tokenizer=None, head=("score.0.weight", "score.0.bias", "score.2.weight",
                                                          "score.2.bias")):
    """A Qwen2.5-Math-PRM-shaped checkpoint: `Qwen2ForProcessRewardModel` (remote code, in auto_map
    only), a random Qwen2 base model under `model.*` and the `score` head's tensors named in `head`."""
    from safetensors.torch import save_file
    from transformers import Qwen2Config, Qwen2Model

    tokenizer = tokenizer or qwen_style_tokenizer()
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, num_labels=2, tie_word_embeddings=False)
    torch.manual_seed(7)
    state = {f"model.{name}": value for name, value in Qwen2Model(config).state_dict().items()}
    shapes = {"score.0.weight": (32, 32), "score.0.bias": (32,), "score.2.weight": (2, 32), "score.2.bias": (2,)}
    state |= {name: torch.randn(shapes[name]) * 0.2 for name in head}  # small: softmax not saturated
    folder.mkdir()
    save_file(state, str(folder / "model.safetensors"))
    config.architectures = ["Qwen2ForProcessRewardModel"]
    config.auto_map = {"AutoModel": "modeling_qwen2_rm.Qwen2ForProcessRewardModel"}
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def registered(folder, style):
    """The folder as register_model leaves it: its stepwise.json written from describe_checkpoint."""
    write_model_config(folder, describe_checkpoint(folder, style=style))
    return prm.load_prm(folder, device="cpu", dtype=torch.float32)


def math_shepherd_card_scores(folder, question, steps):
    """Math-Shepherd's model card, line for line (`output` as its example writes one)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    candidate_tokens = tokenizer.encode("+ -")[1:]
    step_tag_id = tokenizer.encode("ки")[-1]
    output = "\n".join(f"{step if step.startswith('Step ') else f'Step {i + 1}: {step}'} ки"
                       for i, step in enumerate(steps))
    input_id = torch.tensor([tokenizer.encode(f"{question} {output}")])
    with torch.no_grad():
        logits = model(input_id).logits[:, :, candidate_tokens]
        scores = logits.softmax(dim=-1)[:, :, 0]
    return scores[input_id == step_tag_id].tolist()


def qwen_card_scores(folder, question, steps):
    """Qwen2.5-Math-PRM's model card (its make_step_rewards), with its remote-code model written out
    by hand: the Qwen2 base model, then Linear, ReLU, Linear from the checkpoint's `score.*` tensors."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, Qwen2Model

    tokenizer = AutoTokenizer.from_pretrained(folder)
    messages = [
        {"role": "system", "content": "Please reason step by step, and put your final answer within \\boxed{}."},
        {"role": "user", "content": question},
        {"role": "assistant", "content": "<extra_0>".join(steps) + "<extra_0>"},
    ]
    conversation_str = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    input_ids = tokenizer.encode(conversation_str, return_tensors="pt")
    weights = load_file(str(folder / "model.safetensors"))
    base = Qwen2Model.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        hidden = base(input_ids=input_ids).last_hidden_state
        hidden = torch.relu(hidden @ weights["score.0.weight"].T + weights["score.0.bias"])
        logits = hidden @ weights["score.2.weight"].T + weights["score.2.bias"]
    step_sep_id = tokenizer.encode("<extra_0>")[0]
    probabilities = logits.softmax(dim=-1) * (input_ids == step_sep_id).unsqueeze(-1)
    sample = probabilities[0]
    return sample[sample != 0].view(-1, 2)[:, 1].tolist()


def test_the_math_shepherd_text_is_the_cards_question_space_then_numbered_steps_each_closed_by_the_tag():
    tokenizer = mistral_style_tokenizer()
    question, steps = ITEMS[0]
    text = encoding.format_text(tokenizer, question, steps, input_format="math_shepherd")
    assert text == (f"{question} Step 1: She eats 3, so 16 - 3 = 13 eggs are left. ки\n"
                    "Step 2: The answer is: 13 ки")
    numbered = encoding.format_text(tokenizer, *ITEMS[1], input_format="math_shepherd")
    assert numbered.count("Step 1:") == 1 and numbered.endswith("Step 3: The answer is: 4 ки")
    encoded = encoding.encode(tokenizer, question, steps, input_format="math_shepherd")
    assert encoded.ids == tokenizer.encode(text) and encoded.ids[0] == tokenizer.bos_token_id
    assert [encoded.ids[p] for p in encoded.positions] == [tokenizer.encode("ки")[-1]] * 2


def test_the_qwen_text_is_its_chat_template_over_the_system_prompt_and_extra_0_after_each_step():
    tokenizer = qwen_style_tokenizer()
    question, steps = ITEMS[0]
    text = encoding.format_text(tokenizer, question, steps, input_format="qwen_prm")
    assert text == (
        "<|im_start|>system\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        f"<|im_start|>user\n{question}<|im_end|>\n"
        f"<|im_start|>assistant\n{steps[0]}<extra_0>{steps[1]}<extra_0><|im_end|>\n"
    )
    encoded = encoding.encode(tokenizer, question, steps, input_format="qwen_prm")
    assert encoded.ids == tokenizer.encode(text)
    assert [encoded.ids[p] for p in encoded.positions] == [tokenizer.convert_tokens_to_ids("<extra_0>")] * 2


def test_a_math_shepherd_checkpoint_scores_every_step_as_its_model_card_does(tmp_path):
    folder = math_shepherd_folder(tmp_path / "math-shepherd")
    model = registered(folder, "math_shepherd")
    tokenizer = mistral_style_tokenizer()
    assert model.config["input_format"] == "math_shepherd"
    assert [model.config["good_token_id"], model.config["bad_token_id"]] == tokenizer.encode("+ -")[1:]
    ours = model.step_probabilities(ITEMS)
    for (question, steps), scores in zip(ITEMS, ours, strict=True):
        assert [s.p for s in scores] == pytest.approx(math_shepherd_card_scores(folder, question, steps), abs=1e-5)
    assert len({round(s.p, 6) for scores in ours for s in scores}) > 3  # the read positions really differ
    for fast, slow in zip(ours, model.score_per_prefix(ITEMS), strict=True):
        assert [s.p for s in fast] == pytest.approx([s.p for s in slow], abs=1e-5)


def test_a_qwen_math_prm_checkpoint_loads_without_remote_code_and_scores_as_its_model_card_does(tmp_path):
    folder = qwen_math_prm_folder(tmp_path / "qwen-math-prm")
    model = registered(folder, "qwen_prm")
    assert isinstance(model.model, prm.ProcessRewardModel) and not (folder / "modeling_qwen2_rm.py").exists()
    assert model.config["input_format"] == "qwen_prm" and model.config["positive_label"] == 1
    ours = model.step_probabilities(ITEMS)
    for (question, steps), scores in zip(ITEMS, ours, strict=True):
        assert [s.p for s in scores] == pytest.approx(qwen_card_scores(folder, question, steps), abs=1e-5)
    assert len({round(s.p, 6) for scores in ours for s in scores}) > 3


def test_a_tag_that_is_several_tokens_is_refused_as_not_that_models_tokenizer(tmp_path):
    smol_like = build_tiny_tokenizer()  # byte-level BPE, as SmolLM2's: `ки` is 2 tokens
    folder = math_shepherd_folder(tmp_path / "ms", tokenizer=smol_like)
    with pytest.raises(ModelFormatError, match=r"step tag 'ки' is 2 tokens in this tokenizer"):
        describe_checkpoint(folder, style="math_shepherd")


def test_a_qwen_prm_tokenizer_without_a_chat_template_is_refused_naming_it(tmp_path):
    folder = qwen_math_prm_folder(tmp_path / "qwen", tokenizer=qwen_style_tokenizer(chat_template=False))
    with pytest.raises(ModelFormatError, match="no chat_template"):
        describe_checkpoint(folder, style="qwen_prm")


def test_a_process_reward_checkpoint_without_its_score_head_is_refused_before_anything_loads(tmp_path):
    folder = qwen_math_prm_folder(tmp_path / "no-bias", head=("score.0.weight", "score.2.weight"))
    with pytest.raises(ModelFormatError, match=r"initialised at random: score\.0\.bias, score\.2\.bias"):
        describe_checkpoint(folder, style="qwen_prm")


def test_an_unknown_input_format_is_refused_naming_the_field(tmp_path):
    folder = math_shepherd_folder(tmp_path / "ms")
    config = describe_checkpoint(folder, style="math_shepherd") | {"input_format": "chatml"}
    write_model_config(folder, config)
    with pytest.raises(ModelFormatError, match="'input_format' must be one of"):
        prm.load_prm(folder, device="cpu")


@pytest.mark.parametrize("ids, expected", [
    ([5, 9, 7, 9, 9], [1, 3, 4]),  # adjacent tags each count
    ([9], [0]),
    ([1, 2, 3], []),
    ([], []),
])
def test_a_step_is_read_at_every_position_of_its_tag(ids, expected):
    assert encoding.tag_positions(ids, 9) == expected
