// One call through the official `openai` npm package, for the bramble-gateway
// tests: proves the gateway speaks the OpenAI API well enough for the real client.
//
//   node openai_call.mjs --base-url URL --api-key KEY --model M [--stream] [--usage]
//        [--kind chat|completions|embeddings|models] [--text TEXT] [--max-retries N]
//
// Run it from the folder tests/node/install.sh set up (it copies this file next
// to node_modules/openai), so that `import OpenAI from "openai"` resolves.
//
// Prints exactly one JSON line on stdout:
//   success: {"ok":true,"content","chunks","usage","models","embedding_len"}, exit 0
//   error:   {"ok":false,"status","message","type"}, exit 1
//            (with --stream also "content" and "chunks": what arrived before the error)
import { parseArgs } from "node:util";
import OpenAI from "openai";

const options = {
  "base-url": { type: "string" },
  "api-key": { type: "string", default: "none" },
  model: { type: "string" },
  stream: { type: "boolean", default: false },
  usage: { type: "boolean", default: false },
  kind: { type: "string", default: "chat" },
  text: { type: "string", default: "hello world" },
  "max-retries": { type: "string", default: "0" },
};
let opt = { stream: false };

const out = { ok: true, content: "", chunks: 0, usage: null, models: null, embedding_len: null };

async function call(client) {
  const stream = opt.stream;
  const streamOpts = stream && opt.usage ? { stream_options: { include_usage: true } } : {};
  switch (opt.kind) {
    case "models": {
      out.models = [];
      for await (const m of client.models.list()) out.models.push(m.id);
      return;
    }
    case "embeddings": {
      const r = await client.embeddings.create({ model: opt.model, input: opt.text });
      out.embedding_len = r.data[0].embedding.length;
      out.usage = r.usage ?? null;
      return;
    }
    case "chat":
    case "completions": {
      const chat = opt.kind === "chat";
      const body = chat
        ? { model: opt.model, messages: [{ role: "user", content: opt.text }] }
        : { model: opt.model, prompt: opt.text };
      const api = chat ? client.chat.completions : client.completions;
      const r = await api.create({ ...body, stream, ...streamOpts });
      if (!stream) {
        out.content = chat ? r.choices[0].message.content : r.choices[0].text;
        out.chunks = 1;
        out.usage = r.usage ?? null;
        return;
      }
      for await (const c of r) {
        const piece = chat ? c.choices?.[0]?.delta?.content : c.choices?.[0]?.text;
        if (piece) {
          out.content += piece;
          out.chunks += 1;
        }
        if (c.usage) out.usage = c.usage;
      }
      return;
    }
    default:
      throw new Error(`unknown --kind ${opt.kind}`);
  }
}

try {
  opt = parseArgs({ options }).values;
  if (!opt["base-url"]) throw new Error("--base-url is required");
  const client = new OpenAI({
    baseURL: opt["base-url"],
    apiKey: opt["api-key"],
    maxRetries: Number(opt["max-retries"]),
  });
  await call(client);
  process.stdout.write(JSON.stringify(out) + "\n");
  process.exitCode = 0;
} catch (err) {
  const res = {
    ok: false,
    status: err?.status ?? null,
    message: String(err?.message ?? err),
    type: err?.error?.type ?? null,
  };
  if (opt.stream) Object.assign(res, { content: out.content, chunks: out.chunks });
  process.stdout.write(JSON.stringify(res) + "\n");
  process.exitCode = 1;
}
