// Starts npm `oauth2-mock-server` (an OIDC test IdP by AXA, not written here) on loopback and
// prints {"issuer": ...} on stdout. The signed-in user's claims come from a JSON profile file read
// on every token the IdP signs ({"sub","email","email_verified","groups","disabled"}), so a test changes the user's
// groups "at the IdP" by rewriting the file; "disabled": true makes the IdP refuse refresh grants
// with invalid_grant (a deprovisioned user). Every authorize and token request is appended to the
// events file as one JSON line (what the relying party sent). With a key and certificate (PEM) it
// serves HTTPS (oauth2-mock-server's own TLS; the issuer is then https://localhost:<port>). Usage:
//   node oidc_idp_launcher.mjs <oauth2-mock-server entry .mjs> <profile.json> <events.jsonl> [key.pem cert.pem]
import { appendFileSync, readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [entry, profilePath, eventsPath, keyPath, certPath] = process.argv.slice(2);
const { OAuth2Server } = await import(pathToFileURL(entry).href);
const profile = () => JSON.parse(readFileSync(profilePath, "utf8"));
const record = (event) => appendFileSync(eventsPath, JSON.stringify(event) + "\n");

const server = new OAuth2Server(keyPath, certPath);
await server.issuer.keys.generate("RS256");
server.service.on("beforeTokenSigning", (token) => {
  const user = profile();
  // email_verified from the profile (true unless set; null: the claim is left out)
  const verified = user.email_verified === undefined ? true : user.email_verified;
  Object.assign(token.payload, { sub: user.sub, email: user.email, groups: user.groups });
  if (verified !== null) token.payload.email_verified = verified;
});
server.service.on("beforeAuthorizeRedirect", (_redirect, req) => {
  record({ event: "authorize", query: Object.fromEntries(new URL(req.url, "http://x").searchParams) });
});
server.service.on("beforeResponse", (response, req) => {
  const body = req.body ?? {};
  record({ event: "token", grant_type: body.grant_type, has_code_verifier: "code_verifier" in body });
  if (body.grant_type === "refresh_token" && profile().disabled) {
    response.statusCode = 400;
    response.body = { error: "invalid_grant", error_description: "user disabled" };
  }
});
await server.start(0, "127.0.0.1");
console.log(JSON.stringify({ issuer: server.issuer.url }));
