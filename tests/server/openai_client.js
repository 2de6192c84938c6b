// The `openai` npm client (v4) against tg-server: completions and chat, whole and streamed.
// Prints one JSON object with the texts it got; openai_client_test.py compares them.
//   node openai_client.js OPENAI_MODULE_DIR PORT MODEL PROMPT SAMPLING_JSON
// SAMPLING_JSON: the request fields that pick tokens, e.g. {"temperature": 0} or
// {"temperature": 0.8, "seed": 7}.
const [moduleDir, port, model, prompt, samplingJson] = process.argv.slice(2);
const mod = require(require.resolve('openai', {paths: [moduleDir]}));
const OpenAI = mod.default || mod.OpenAI || mod;
const sampling = JSON.parse(samplingJson);

async function main() {
  const client = new OpenAI({baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused'});
  const messages = [{role: 'user', content: prompt}];
  const out = {};
  const c = await client.completions.create({model, prompt, max_tokens: 24, ...sampling});
  out.completion = c.choices[0].text;
  out.finish_reason = c.choices[0].finish_reason;
  out.usage = c.usage;
  let text = '';
  for await (const chunk of await client.completions.create(
      {model, prompt, max_tokens: 24, ...sampling, stream: true})) {
    text += (chunk.choices[0] && chunk.choices[0].text) || '';
  }
  out.completion_stream = text;
  const chat = await client.chat.completions.create({model, messages, max_tokens: 16, ...sampling});
  out.chat = chat.choices[0].message.content;
  out.chat_role = chat.choices[0].message.role;
  text = '';
  for await (const chunk of await client.chat.completions.create(
      {model, messages, max_tokens: 16, ...sampling, stream: true})) {
    text += (chunk.choices[0] && chunk.choices[0].delta && chunk.choices[0].delta.content) || '';
  }
  out.chat_stream = text;
  const models = await client.models.list();
  out.models = models.data.map((m) => m.id);
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(`openai client failed: ${e}`);
  process.exit(1);
});
