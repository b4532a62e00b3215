// A real OpenID Connect authorization server for the OAuth end-to-end test: panva's
// oidc-provider (`make oidc-provider` installs it under .venv/oidc-provider), run by the venv's
// Node on 127.0.0.1. One public client (authorization code + PKCE) and one user, both from the
// OIDC_TEST_CONFIG environment variable (JSON):
//   {"port", "provider_module", "client_id", "redirect_uri", "resource", "scope",
//    "user": {"sub", "email", "groups"}}
// Resource indicators (RFC 8707) are on, so the access token for `resource` is a JWT (RFC 9068)
// whose audience is that resource. devInteractions are off; the login and consent prompts are
// answered by a tiny interaction endpoint that signs the configured user in and grants what was
// asked, as a person clicking "allow" would. Prints "ready <issuer>" once it listens.
import crypto from 'node:crypto';
import http from 'node:http';
import { pathToFileURL } from 'node:url';

const cfg = JSON.parse(process.env.OIDC_TEST_CONFIG);
const { default: Provider, errors } = await import(pathToFileURL(cfg.provider_module).href);
const issuer = `http://127.0.0.1:${cfg.port}`;
const { user } = cfg;

const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const signing = { ...privateKey.export({ format: 'jwk' }), kid: crypto.randomUUID(), use: 'sig', alg: 'RS256' };

const provider = new Provider(issuer, {
  clients: [{
    client_id: cfg.client_id,
    token_endpoint_auth_method: 'none',
    application_type: 'native', // a loopback redirect URI, as a desktop MCP client has
    redirect_uris: [cfg.redirect_uri],
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
  }],
  jwks: { keys: [signing] },
  cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
  pkce: { required: () => true },
  findAccount: async (ctx, id) => (id !== user.sub ? undefined : {
    accountId: id,
    claims: async () => ({ sub: id, email: user.email, email_verified: true, groups: user.groups }),
  }),
  claims: { openid: ['sub'], email: ['email', 'email_verified'], groups: ['groups'] },
  extraTokenClaims: async (ctx, token) => (token.accountId === user.sub
    ? { email: user.email, email_verified: true, groups: user.groups } : {}),
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  features: {
    devInteractions: { enabled: false },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => cfg.resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (ctx, resourceIndicator) => {
        if (resourceIndicator !== cfg.resource) throw new errors.InvalidTarget(`unknown resource ${resourceIndicator}`);
        return {
          scope: cfg.scope,
          audience: resourceIndicator,
          accessTokenTTL: 600,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'RS256' } },
        };
      },
    },
  },
});

// Sign the user in and consent to what the client asked for.
async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session } = details;
  let result;
  if (prompt.name === 'login') {
    result = { login: { accountId: user.sub } };
  } else {
    const grant = details.grantId ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    const missing = prompt.details;
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    result = { consent: { grantId: await grant.save() } };
  }
  await provider.interactionFinished(req, res, result, { mergeWithLastSubmission: false });
}

const callback = provider.callback();
http.createServer((req, res) => {
  if (req.url.startsWith('/interaction/')) {
    interaction(req, res).catch((err) => {
      res.statusCode = 500;
      res.end(String(err && err.message));
    });
    return;
  }
  callback(req, res);
}).listen(cfg.port, '127.0.0.1', () => {
  process.stdout.write(`ready ${issuer}\n`);
});
