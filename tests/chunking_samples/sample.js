import { EventEmitter } from "events";

const DEFAULT_TIMEOUT = 5000;

/** A queue that retries failed jobs. */
export class RetryQueue extends EventEmitter {
  constructor(limit) {
    super();
    this.limit = limit;
    this.jobs = [];
  }

  push(job) {
    this.jobs.push(job);
    this.emit("queued", job);
  }

  async drain() {
    while (this.jobs.length) {
      await this.jobs.shift()();
    }
  }
}

export function backoff(attempt) {
  return Math.min(2 ** attempt * 100, DEFAULT_TIMEOUT);
}

const jitter = (ms) => ms + Math.random() * 10;
