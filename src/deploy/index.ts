/**
 * Every install manifest, generated from one source (`npm run generate`): the Helm chart, the kustomize base and
 * overlays, the monitoring files, the container build and the aggregated layout's RBAC used by
 * `sbx up --layout aggregated`.
 */
import { accessObjects, userRoles } from './access.js';
import { GENERATED, renderChart } from './helm.js';
import { dockerfile } from './images.js';
import { APISERVER } from './model.js';
import { dashboard, ruleFile } from './monitoring.js';
import { concrete, toYaml } from './params.js';
import { buildContext } from './parts.js';
import { renderKustomize } from './kustomize.js';
import { DEFAULT_NAMESPACE } from './values.js';

export const CHART_DIR = 'deploy/helm/sandbox-operator';
export const KUSTOMIZE_DIR = 'deploy/kustomize';
/** Directories under deploy/ whose every file is generated (a file there that is not is drift too). */
export const GENERATED_DIRS = [CHART_DIR, KUSTOMIZE_DIR, 'deploy/monitoring', 'deploy/images'];
export const AGGREGATED_RBAC_FILE = 'deploy/aggregated/rbac.yaml';

/** The aggregated layout's RBAC for a local cluster (`sbx up`, the tests): sandbox-apiserver's and the users'. */
function aggregatedRbac(): string {
  const c = buildContext({ layout: 'aggregated', certManager: false });
  const objects = [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: DEFAULT_NAMESPACE } },
    ...accessObjects(APISERVER, c),
    ...userRoles(APISERVER),
  ];
  return `${GENERATED}${objects.map((o) => `---\n${toYaml(concrete(o))}`).join('')}`;
}

/** Repository path -> content of every generated install file. */
export function renderDeployFiles(): Record<string, string> {
  const files: Record<string, string> = {};
  for (const [path, content] of Object.entries(renderChart())) files[`${CHART_DIR}/${path}`] = content;
  for (const [path, content] of Object.entries(renderKustomize())) files[`${KUSTOMIZE_DIR}/${path}`] = content;
  files['deploy/monitoring/sandbox-operator-dashboard.json'] = `${JSON.stringify(dashboard(), null, 2)}\n`;
  files['deploy/monitoring/alerts.yaml'] = `${GENERATED}${toYaml(ruleFile())}`;
  files[AGGREGATED_RBAC_FILE] = aggregatedRbac();
  files['deploy/images/Dockerfile'] = dockerfile(GENERATED);
  return files;
}
