"""OAuth 2.1 for `/mcp`: Fathom as a resource server of the operator's authorization server
(the MCP authorization specification). One module per mechanism: `resource` (RFC 9728
metadata and the 401 challenge), `keys` (the issuer's JWKS), `access_tokens` (JWT validation),
`introspection` (RFC 7662), `mapping` (claims to projects and rights), and `verifier`, the facade
the request guard holds. The static tokens (`server.tokens`, `server.auth`) work beside it.
"""
