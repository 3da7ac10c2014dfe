"""Specs shared by the projection tests: a small MoE model with MTP and a PP=4 run of it; a Llama-like dense model
and an 8-layer MoE one."""

from primus_ext.specs import ExecutionSpec, ModelSpec

MOE = ModelSpec(name="moe-ish", num_layers=12, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=16,
                num_query_groups=4, kv_channels=128, vocab_size=32000, num_experts=64, moe_router_topk=4,
                moe_ffn_hidden_size=1024, moe_shared_expert_intermediate_size=1024,
                moe_layer_pattern=(False,) + (True,) * 11, mtp_num_layers=1)
BASE = ExecutionSpec(tensor_model_parallel_size=2, pipeline_model_parallel_size=4, data_parallel_size=8,
                     expert_model_parallel_size=8, sequence_parallel=True, seq_length=4096, micro_batch_size=1,
                     global_batch_size=512, use_distributed_optimizer=True)
LLAMA = ModelSpec(name="llama-ish", num_layers=16, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32,
                  num_query_groups=8, kv_channels=128, vocab_size=128256)
MOE8 = ModelSpec(name="moe-ish", num_layers=8, hidden_size=2048, ffn_hidden_size=8192, num_attention_heads=16,
                 num_query_groups=4, kv_channels=128, vocab_size=32000, num_experts=64, moe_router_topk=4,
                 moe_ffn_hidden_size=1024, moe_shared_expert_intermediate_size=1024,
                 moe_layer_pattern=(False,) + (True,) * 7)
