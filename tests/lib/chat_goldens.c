/*
 * chat_goldens.c - llama.cpp's renderings of one conversation in every
 * chat format (chat_goldens.h); where they come from is told in
 * check_chat_render.c's opening comment.
 */
#include "chat_goldens.h"

#define MSG(role, text)	{ CHAT_ROLE_ ## role, text, sizeof(text) - 1 }

const struct chat_msg conv_llamacpp[CONV_LLAMACPP_N] = {
	MSG(SYSTEM, "You are a helpful assistant"),
	MSG(USER, "Hello"),
	MSG(ASSISTANT, "Hi there"),
	MSG(USER, "Who are you"),
	MSG(ASSISTANT, "   I am an assistant   "),
	MSG(USER, "Another question"),
};

/* conv_llamacpp and the generation prompt (test-chat-template.cpp). */
const struct chat_golden llamacpp_goldens[LLAMACPP_GOLDENS_N] = {
	{ CHAT_CHATML,
	    "teknium/OpenHermes-2.5-Mistral-7B",
	    "<|im_start|>system\nYou are a helpful assistant<|im_end|>"
	    "\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistan"
	    "t\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_"
	    "end|>\n<|im_start|>assistant\n   I am an assistant   <|im"
	    "_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|i"
	    "m_start|>assistant\n" },
	{ CHAT_LLAMA2,
	    "mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 with"
	    "out a system prompt)",
	    "[INST] You are a helpful assistant\nHello [/INST]Hi there"
	    "</s>[INST] Who are you [/INST]   I am an assistant   </s>"
	    "[INST] Another question [/INST]" },
	{ CHAT_LLAMA2_SYS,
	    NULL,
	    "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"
	    "Hello [/INST]Hi there</s>[INST] Who are you [/INST]   I a"
	    "m an assistant   </s>[INST] Another question [/INST]" },
	{ CHAT_LLAMA2_SYS_BOS,
	    "TheBloke/FusionNet_34Bx2_MoE-AWQ",
	    "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"
	    "Hello [/INST]Hi there</s><s>[INST] Who are you [/INST]   "
	    "I am an assistant   </s><s>[INST] Another question [/INST"
	    "]" },
	{ CHAT_LLAMA2_SYS_STRIP,
	    "bofenghuang/vigogne-2-70b-chat",
	    "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\n"
	    "Hello [/INST]Hi there</s>[INST] Who are you [/INST]I am a"
	    "n assistant</s>[INST] Another question [/INST]" },
	{ CHAT_MISTRAL,
	    "mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 with"
	    "out a system prompt)",
	    "[INST] You are a helpful assistant\nHello [/INST]Hi there"
	    "</s>[INST] Who are you [/INST]   I am an assistant   </s>"
	    "[INST] Another question [/INST]" },
	{ CHAT_MISTRAL_V1,
	    "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' templa"
	    "te with a system prompt)",
	    " [INST] You are a helpful assistant\n\nHello [/INST] Hi t"
	    "here</s> [INST] Who are you [/INST]    I am an assistant "
	    "  </s> [INST] Another question [/INST]" },
	{ CHAT_MISTRAL_V3,
	    "Mistral-Large-Instruct-2407 (mistralai 'v3' template; mod"
	    "ified to have system prompt at start)",
	    "[INST] You are a helpful assistant\n\nHello[/INST] Hi the"
	    "re</s>[INST] Who are you[/INST] I am an assistant</s>[INS"
	    "T] Another question[/INST]" },
	{ CHAT_MISTRAL_V3_TEKKEN,
	    "Mistral-Nemo-Instruct-2407 (mistralai 'v3-tekken' templat"
	    "e; modified to have system prompt at start)",
	    "[INST]You are a helpful assistant\n\nHello[/INST]Hi there"
	    "</s>[INST]Who are you[/INST]   I am an assistant   </s>[I"
	    "NST]Another question[/INST]" },
	{ CHAT_MISTRAL_V7,
	    "mistralai/Mistral-Large-Instruct-2411 (mistralai 'v7' tem"
	    "plate)",
	    "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMP"
	    "T][INST] Hello[/INST] Hi there</s>[INST] Who are you[/INS"
	    "T]    I am an assistant   </s>[INST] Another question[/IN"
	    "ST]" },
	{ CHAT_ZEPHYR,
	    NULL,
	    "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|u"
	    "ser|>\nHello<|endoftext|>\n<|assistant|>\nHi there<|endof"
	    "text|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>"
	    "\n   I am an assistant   <|endoftext|>\n<|user|>\nAnother"
	    " question<|endoftext|>\n<|assistant|>\n" },
	{ CHAT_GEMMA,
	    "google/gemma-7b-it",
	    "<start_of_turn>user\nYou are a helpful assistant\n\nHello"
	    "<end_of_turn>\n<start_of_turn>model\nHi there<end_of_turn"
	    ">\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_"
	    "of_turn>model\nI am an assistant<end_of_turn>\n<start_of_"
	    "turn>user\nAnother question<end_of_turn>\n<start_of_turn>"
	    "model\n" },
	{ CHAT_LLAMA3,
	    "Llama-3",
	    "<|start_header_id|>system<|end_header_id|>\n\nYou are a h"
	    "elpful assistant<|eot_id|><|start_header_id|>user<|end_he"
	    "ader_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<"
	    "|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>"
	    "user<|end_header_id|>\n\nWho are you<|eot_id|><|start_hea"
	    "der_id|>assistant<|end_header_id|>\n\nI am an assistant<|"
	    "eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnoth"
	    "er question<|eot_id|><|start_header_id|>assistant<|end_he"
	    "ader_id|>\n\n" },
	{ CHAT_PHI3,
	    "Phi-3-mini",
	    "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>"
	    "\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>"
	    "\nWho are you<|end|>\n<|assistant|>\n   I am an assistant"
	    "   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistan"
	    "t|>\n" },
	{ CHAT_PHI4,
	    "phi-4",
	    "<|im_start|>system<|im_sep|>You are a helpful assistant<|"
	    "im_end|><|im_start|>user<|im_sep|>Hello<|im_end|><|im_sta"
	    "rt|>assistant<|im_sep|>Hi there<|im_end|><|im_start|>user"
	    "<|im_sep|>Who are you<|im_end|><|im_start|>assistant<|im_"
	    "sep|>   I am an assistant   <|im_end|><|im_start|>user<|i"
	    "m_sep|>Another question<|im_end|><|im_start|>assistant<|i"
	    "m_sep|>" },
};
