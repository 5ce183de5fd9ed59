// openai_client.cjs - cpd-http driven by the official openai package, as
// an application would: node openai_client.cjs BASE_URL (NODE_PATH naming
// the node_modules that hold openai).  Lists the models, asks one chat
// question whole, with top_logprobs, streamed, and with a response_format
// json_schema (the answer must parse to its object), checks that n: 2 is a
// BadRequestError naming "n", asks for a completion with logprobs, and
// prints what it got as one JSON line for check_http to compare with cpq.
// Exits 1 on any mismatch.
'use strict';
const OpenAI = require('openai');

function check(ok, what) {
	if (!ok)
		throw new Error('check failed: ' + what);
}

async function main() {
	const client = new OpenAI({ baseURL: process.argv[2] + '/v1',
	    apiKey: 'none', maxRetries: 0, timeout: 60000 });
	const ids = [];
	for await (const m of client.models.list())
		ids.push(m.id);
	check(ids.length === 1, 'one model: ' + JSON.stringify(ids));
	const messages = [
		{ role: 'system', content: 'Tell a story.' },
		{ role: 'user', content: 'Once upon a time' },
	];
	const ask = { model: ids[0], messages, temperature: 0,
	    max_tokens: 24 };
	const whole = await client.chat.completions.create(ask);
	check(whole.object === 'chat.completion', 'object');
	check(whole.usage.completion_tokens === 24, 'usage');
	const lp = await client.chat.completions.create({ ...ask,
	    logprobs: true, top_logprobs: 3 });
	const content = lp.choices[0].logprobs.content;
	check(content.length > 0 && content.every((t) =>
	    t.top_logprobs.length === 3 &&
	    t.top_logprobs[0].token === t.token &&
	    t.bytes.length === t.top_logprobs[0].bytes.length),
	    'top_logprobs');
	const stream = await client.chat.completions.create({ ...ask,
	    stream: true, stream_options: { include_usage: true } });
	let streamed = '', usage = null, finish = null;
	for await (const chunk of stream) {
		if (chunk.choices.length > 0) {
			streamed += chunk.choices[0].delta.content ?? '';
			finish = chunk.choices[0].finish_reason ?? finish;
		}
		if (chunk.usage)
			usage = chunk.usage;
	}
	check(finish === 'length', 'finish_reason ' + finish);
	check(usage !== null && usage.completion_tokens === 24, 'stream usage');
	const shaped = await client.chat.completions.create({ ...ask,
	    max_tokens: 80, response_format: { type: 'json_schema',
	    json_schema: { name: 'answer', strict: true, schema: {
	    type: 'object', properties: { ok: { type: 'boolean' } },
	    required: ['ok'], additionalProperties: false } } } });
	const answer = JSON.parse(shaped.choices[0].message.content);
	check(shaped.choices[0].finish_reason === 'stop' &&
	    Object.keys(answer).join() === 'ok' &&
	    typeof answer.ok === 'boolean', 'json_schema ' +
	    shaped.choices[0].message.content);
	let refused = null;
	try {
		await client.chat.completions.create({ ...ask, n: 2 });
	} catch (e) {
		refused = e;
	}
	check(refused instanceof OpenAI.BadRequestError, 'n: 2 refused');
	check(refused.status === 400 && refused.param === 'n', 'error shape');
	const text = await client.completions.create({ model: ids[0],
	    prompt: 'Once upon a time', temperature: 0, max_tokens: 16,
	    logprobs: 2 });
	const tl = text.choices[0].logprobs;
	check(tl.tokens.join('') === text.choices[0].text &&
	    tl.top_logprobs.length === tl.tokens.length &&
	    tl.token_logprobs.length === tl.tokens.length, 'legacy logprobs');
	console.log(JSON.stringify({ chat: whole.choices[0].message.content,
	    streamed, completion: text.choices[0].text }));
}

main().catch((e) => {
	console.error(e.stack || String(e));
	process.exit(1);
});
