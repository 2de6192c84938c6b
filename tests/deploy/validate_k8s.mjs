// Validates Kubernetes objects against the API's JSON schemas (npm kubernetes-models and
// @kubernetes-models/prometheus-operator), offline. Reads a JSON array of objects on stdin;
// prints one line per object and exits 1 when any is invalid or of an unknown kind.
// k8s_render_test.py copies this file into the npm cache folder it installed the packages
// into, so that the bare module names resolve there.
const modules = {
  "v1": (kind) => `kubernetes-models/v1/${kind}`,
  "monitoring.coreos.com/v1": (kind) =>
    `@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${kind}`,
};

function modulePath(apiVersion, kind) {
  if (modules[apiVersion]) return modules[apiVersion](kind);
  return `kubernetes-models/${apiVersion}/${kind}`;  // apps/v1, batch/v1, policy/v1, ...
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const objects = JSON.parse(Buffer.concat(chunks).toString());
let bad = 0;
for (const obj of objects) {
  const name = `${obj.kind}/${obj.metadata?.name}`;
  try {
    const mod = await import(modulePath(obj.apiVersion, obj.kind));
    new mod[obj.kind](obj).validate();
    console.log(`valid: ${obj.apiVersion} ${name}`);
  } catch (e) {
    bad++;
    console.log(`INVALID: ${obj.apiVersion} ${name}: ${e.message}`);
  }
}
process.exit(bad ? 1 : 0);
