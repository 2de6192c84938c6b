// The `openai` npm client (v4) against tg-server: completions and chat, whole and streamed.
// Prints one JSON object with the texts it got; openai_client_test.py compares them.
//   node openai_client.js OPENAI_MODULE_DIR PORT MODEL PROMPT
const [moduleDir, port, model, prompt] = process.argv.slice(2);
const mod = require(require.resolve('openai', {paths: [moduleDir]}));
const OpenAI = mod.default || mod.OpenAI || mod;

async function main() {
  const client = new OpenAI({baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused'});
  const messages = [{role: 'user', content: prompt}];
  const out = {};
  const c = await client.completions.create(
      {model, prompt, max_tokens: 24, temperature: 0});
  out.completion = c.choices[0].text;
  out.finish_reason = c.choices[0].finish_reason;
  out.usage = c.usage;
  let text = '';
  for await (const chunk of await client.completions.create(
      {model, prompt, max_tokens: 24, temperature: 0, stream: true})) {
    text += (chunk.choices[0] && chunk.choices[0].text) || '';
  }
  out.completion_stream = text;
  const chat = await client.chat.completions.create(
      {model, messages, max_tokens: 16, temperature: 0});
  out.chat = chat.choices[0].message.content;
  out.chat_role = chat.choices[0].message.role;
  text = '';
  for await (const chunk of await client.chat.completions.create(
      {model, messages, max_tokens: 16, temperature: 0, stream: true})) {
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
