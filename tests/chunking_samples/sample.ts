import type { Request } from "./http";

export interface Route {
  method: string;
  path: string;
}

export class Router {
  private routes: Route[] = [];

  add(route: Route): void {
    this.routes.push(route);
  }

  match(req: Request): Route | undefined {
    return this.routes.find((r) => r.path === req.path);
  }
}

export function normalize(path: string): string {
  return path.replace(/\/+$/, "");
}
