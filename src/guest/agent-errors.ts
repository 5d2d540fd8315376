/** The errors of agent operations: the errno an operation failed with, as a SandboxError code. */
import type { ErrorCode } from '../error-codes.js';
import { SandboxError } from '../errors.js';

/**
 * The code of each errno the agent answers an operation with (agent/*.go: `newOpError` and `errnoCode`); any other
 * errno is `agent.errno`, with the errno in the message.
 */
export const AGENT_ERRNO_CODES: Readonly<Record<string, ErrorCode>> = {
  EACCES: 'agent.eacces',
  EADDRINUSE: 'agent.eaddrinuse',
  EBUSY: 'agent.ebusy',
  ECANCELED: 'agent.ecanceled',
  ECONNREFUSED: 'agent.econnrefused',
  EEXIST: 'agent.eexist',
  EFRAMETOOLARGE: 'agent.eframetoolarge',
  EINTERNAL: 'agent.einternal',
  EINVAL: 'agent.einval',
  EIO: 'agent.eio',
  EISDIR: 'agent.eisdir',
  ELIMIT: 'agent.elimit',
  ENOENT: 'agent.enoent',
  ENOTDIR: 'agent.enotdir',
  ENOTEMPTY: 'agent.enotempty',
  ENOTSUP: 'agent.enotsup',
  EPROTO: 'agent.eproto',
  ESRCH: 'agent.esrch',
  EUNKNOWNOP: 'agent.eunknownop',
};

export function agentError(op: string, res: Record<string, unknown>): SandboxError {
  const errno = typeof res.code === 'string' ? res.code : 'EIO';
  // The guest's words end up in logs and in answers to clients: a line, not a megabyte.
  const message = typeof res.message === 'string' ? res.message.slice(0, 1024) : 'agent error';
  const hints: Record<string, string> = {
    ENOENT: 'check the path or command name inside the guest',
    EFRAMETOOLARGE: 'split the data into chunks of at most 1 MiB',
    EUNKNOWNOP: 'the guest agent is older than this host; rebuild the guest image',
  };
  const code = Object.hasOwn(AGENT_ERRNO_CODES, errno) ? AGENT_ERRNO_CODES[errno]! : undefined;
  return new SandboxError(code ?? 'agent.errno', `${op}: ${message}${code ? '' : ` (${errno})`}`, {
    hint: hints[errno],
  });
}
