/**
 * The component images as real nodes get them (src/cluster/component-images.ts → scripts/build-images.sh →
 * image archives): named as the chart's defaults resolve on a node, cached by their inputs, and the sandboxd image
 * holding what sandboxd needs at run time: QEMU, nft, ip, nsenter, the guest kernel / initramfs / root filesystems
 * where SBX_GUEST_IMAGES points (read by the image's own src/guest/prebuilt.ts, with the hashes this machine
 * built; the image's QEMU boots them to the guest agent), and a sandboxd entrypoint that runs.
 *
 * Building takes about a minute when only src/ changed (2.5 min cold, plus the guest images if this machine has
 * none), so the image part runs under CI=true (where the chart e2e needs the same cached archives) or with
 * SBX_TEST_IMAGES=1, and skips otherwise. The name rules run always.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import {
  chartImageNames,
  ensureComponentImages,
  IMAGE_COMPONENTS,
  normalizeImageName,
  type ImageComponent,
} from '../../src/cluster/component-images.js';
import { readClusterEnvironment } from '../../src/cluster/options.js';
import type { NodeImage } from '../../src/cluster/node-images.js';
import { APP_DIR, GUEST_IMAGES_DIR, IMAGE_TARGETS, IMAGE_USER } from '../../src/deploy/images.js';
import { DEFAULT_VALUES } from '../../src/deploy/values.js';
import { ensureGuestImage, listGuestTemplates } from '../../src/guest/images.js';

const exec = promisify(execFile);
const RUN = process.env.CI === 'true' || process.env.SBX_TEST_IMAGES === '1';

interface ArchiveConfig {
  config: { Entrypoint?: string[]; Env?: string[]; User?: string };
}

/** manifest.json and the image config of a docker-archive, read without unpacking the layers. */
async function readArchive(archive: string): Promise<{ repoTags: string[]; config: ArchiveConfig }> {
  const file = async (name: string) =>
    (await exec('tar', ['-xOf', archive, name], { encoding: 'utf8', maxBuffer: 16 << 20 })).stdout;
  const [manifest] = JSON.parse(await file('manifest.json')) as Array<{ Config: string; RepoTags: string[] }>;
  assert.ok(manifest, `${archive} holds an image`);
  return { repoTags: manifest.RepoTags, config: JSON.parse(await file(manifest.Config)) as ArchiveConfig };
}

describe('component image names', () => {
  it("are the chart's defaults as a node's CRI normalises them", () => {
    assert.equal(normalizeImageName('sandboxd:0.1.0'), 'docker.io/library/sandboxd:0.1.0');
    assert.equal(normalizeImageName('acme/sandboxd:1'), 'docker.io/acme/sandboxd:1');
    assert.equal(normalizeImageName('sandboxd'), 'docker.io/library/sandboxd:latest');
    assert.equal(normalizeImageName('localhost/sbx/busybox:1'), 'localhost/sbx/busybox:1');
    assert.equal(normalizeImageName('registry.k8s.io/pause:3.10.1'), 'registry.k8s.io/pause:3.10.1');
    assert.equal(normalizeImageName('localhost:5000/x'), 'localhost:5000/x:latest');
    assert.equal(normalizeImageName('ghcr.io/a/b@sha256:00'), 'ghcr.io/a/b@sha256:00');
    const names = chartImageNames();
    for (const c of IMAGE_COMPONENTS)
      assert.equal(names[c], `docker.io/library/${DEFAULT_VALUES.images[c]}`, `${c}: a short name in the chart`);
  });
});

describe(
  'component images',
  { skip: !RUN && 'set SBX_TEST_IMAGES=1 (runs under CI=true)', timeout: 30 * 60_000 },
  () => {
    let images: Record<ImageComponent, NodeImage>;
    const cacheDir = readClusterEnvironment().cacheDir;

    it('are archives named as the chart resolves them, with the entrypoints and users the manifests expect', async () => {
      images = await ensureComponentImages({ cacheDir, progress: (l) => process.stderr.write(`${l}\n`) });
      const names = chartImageNames();
      for (const c of IMAGE_COMPONENTS) {
        assert.equal(images[c].name, names[c]);
        const { repoTags, config } = await readArchive(images[c].archive);
        assert.ok(repoTags.includes(names[c]), `${c}: ${names[c]} among the archive's names ${repoTags.join(', ')}`);
        assert.deepEqual(config.config.Entrypoint, ['node', `${APP_DIR}/${IMAGE_TARGETS[c].entrypoint}`]);
        assert.equal(config.config.User ?? '', c === 'sandboxd' ? '' : `${IMAGE_USER}:${IMAGE_USER}`);
      }
      const env = (await readArchive(images.sandboxd.archive)).config.config.Env ?? [];
      assert.ok(env.includes(`SBX_GUEST_IMAGES=${GUEST_IMAGES_DIR}`), env.join(' '));
    });

    it('are cached by their inputs: a second call builds nothing and returns the same archives', async () => {
      const lines: string[] = [];
      const again = await ensureComponentImages({ cacheDir, progress: (l) => lines.push(l) });
      assert.deepEqual(lines, [], 'nothing built');
      assert.deepEqual(again, images);
    });

    it('hold, in sandboxd, QEMU, the network tools, the guest images sandboxd reads, and a working entrypoint', async () => {
      const guest = Object.fromEntries(
        await Promise.all(listGuestTemplates().map(async (t) => [t.name, (await ensureGuestImage(t.name)).hash])),
      );
      // The archive itself, as a node imports it, into buildah's storage under a name of this test's own.
      const name = `localhost/sbx-test/sandboxd-check:${process.pid}`;
      const buildah = (args: string[]) => exec('buildah', args, { encoding: 'utf8', maxBuffer: 64 << 20 });
      const id = (await buildah(['pull', '-q', `docker-archive:${images.sandboxd.archive}`])).stdout.trim();
      await buildah(['tag', id.split('\n').at(-1)!, name]);
      const ctr = (await buildah(['from', '-q', '--pull-never', name])).stdout.trim();
      try {
        const run = (script: string) => buildah(['run', ctr, '--', 'sh', '-c', script]);
        assert.match((await run('qemu-system-x86_64 --version')).stdout, /QEMU emulator version/);
        await run('command -v nft && command -v ip && command -v nsenter && command -v dmesg');
        // What sandboxd does with SBX_GUEST_IMAGES: resolve each template through the image's own prebuilt.js.
        const resolved = JSON.parse(
          (
            await run(`cd ${APP_DIR} && node --input-type=module -e '
            import { statSync } from "node:fs";
            import { listGuestTemplates } from "./dist/src/guest/images.js";
            import { prebuiltGuestImage } from "./dist/src/guest/prebuilt.js";
            const out = { hashes: {}, boot: {} };
            for (const t of listGuestTemplates()) {
              const a = prebuiltGuestImage(process.env.SBX_GUEST_IMAGES, t);
              for (const f of [a.kernel, a.initramfs, a.rootfs].filter(Boolean)) if (!statSync(f).size) throw new Error(f + " is empty");
              out.hashes[t.name] = a.hash;
              if (!a.rootfs) out.boot = { kernel: a.kernel, initramfs: a.initramfs };
            }
            console.log(JSON.stringify(out));'`)
          ).stdout,
        ) as { hashes: Record<string, string>; boot: { kernel: string; initramfs: string } };
        assert.deepEqual(
          resolved.hashes,
          guest,
          'the image holds the guest images this machine built, for every template',
        );
        // The image's QEMU (its firmware from qemu-system-data included) boots the image's kernel and initramfs to
        // the guest agent, which then stops: no virtio port, as this plain boot gives it none (~8 s under TCG).
        const boot = await run(
          `timeout 120 qemu-system-x86_64 -M microvm,acpi=off -m 256 -nodefaults -no-user-config -nographic \
            -serial stdio -no-reboot -kernel ${resolved.boot.kernel} -initrd ${resolved.boot.initramfs} \
            -append 'console=ttyS0 reboot=t panic=-1 quiet' </dev/null 2>&1 || true`,
        );
        assert.match(boot.stdout, /SBX_AGENT_START/, boot.stdout.slice(-2000));
        const help = await run(`node ${APP_DIR}/${IMAGE_TARGETS.sandboxd.entrypoint} --help`);
        assert.match(help.stdout, /--pools/);
      } finally {
        await buildah(['rm', ctr]).catch(() => undefined);
        // Untags (or removes, when nothing else names it) what the pull added.
        for (const n of [name, images.sandboxd.name]) await buildah(['rmi', n]).catch(() => undefined);
      }
    });
  },
);
