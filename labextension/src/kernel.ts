/**
 * Running code in a notebook's kernel and collecting what it prints, so the commands
 * can show it in a notification instead of in a cell.
 */
import { Kernel, KernelMessage } from '@jupyterlab/services';

/** A kernel-side failure: the exception (or usage error) the code raised. */
export class KernelRunError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'KernelRunError';
  }
}

/**
 * Execute `code` in `kernel` (not stored in its history) and resolve to everything it
 * printed. Rejects with a `KernelRunError` holding the exception's `Name: message`
 * (or, for IPython's usage errors, what was printed to stderr).
 */
export async function runInKernel(kernel: Kernel.IKernelConnection, code: string): Promise<string> {
  const future = kernel.requestExecute({ code, silent: false, store_history: false });
  const printed: string[] = [];
  const stderr: string[] = [];
  let exception: string | null = null;
  future.onIOPub = msg => {
    if (KernelMessage.isStreamMsg(msg)) {
      printed.push(msg.content.text);
      if (msg.content.name === 'stderr') {
        stderr.push(msg.content.text);
      }
    } else if (KernelMessage.isErrorMsg(msg)) {
      exception = `${msg.content.ename}: ${msg.content.evalue}`;
    } else if (KernelMessage.isExecuteResultMsg(msg) || KernelMessage.isDisplayDataMsg(msg)) {
      const text = msg.content.data['text/plain'];
      if (typeof text === 'string') {
        printed.push(`${text}\n`);
      }
    }
  };
  const reply = await future.done;
  if (reply.content.status !== 'ok' || exception !== null) {
    const fromReply =
      reply.content.status === 'error' ? `${reply.content.ename}: ${reply.content.evalue}` : null;
    throw new KernelRunError(
      exception ?? (stderr.join('').trim() || fromReply || 'The kernel aborted the request.')
    );
  }
  return printed.join('').trim();
}
