"""Small layer architectures shared by tests in several folders (tests/measure, tests/model).

tests/support/ is on pytest's ``pythonpath`` (pyproject.toml), so ``from archs import GQA`` works from
any test folder and from ``pytest tests/model`` alone; a uniquely named module, since importing
``conftest`` by name picks whichever conftest pytest loaded last."""

from primus_ext.model.rank_shape import LayerArch

GQA = LayerArch(hidden_size=256, num_attention_heads=8, num_query_groups=2, kv_channels=32, ffn_hidden_size=512,
                vocab_size=1024)
MOE = LayerArch(hidden_size=256, num_attention_heads=4, num_query_groups=2, kv_channels=64, ffn_hidden_size=0,
                num_experts=4, moe_router_topk=2, moe_ffn_hidden_size=256, moe_shared_expert_intermediate_size=256)
MLA = LayerArch(hidden_size=256, num_attention_heads=4, num_query_groups=4, kv_channels=64, ffn_hidden_size=512,
                multi_latent_attention=True, q_lora_rank=96, kv_lora_rank=64, qk_head_dim=32,
                qk_pos_emb_head_dim=16, v_head_dim=32, qk_layernorm=True)
