// JSON over fetch with the session cookie and Django's CSRF header.

export class ApiError extends Error {
  constructor(status, detail, code = "") {
    super(detail);
    this.status = status;
    this.detail = detail;
    // The stable code of the server's error body ("already_decided", "expired"…), if any.
    this.code = code;
  }
}

export function makeApi(csrfCookieName) {
  function csrfToken() {
    const prefix = `${csrfCookieName}=`;
    for (const part of document.cookie.split(";")) {
      const item = part.trim();
      if (item.startsWith(prefix)) return decodeURIComponent(item.slice(prefix.length));
    }
    return "";
  }

  /** Resolve with the parsed body on 2xx; reject with ApiError(status, detail) otherwise. */
  async function request(method, url, body) {
    const headers = { Accept: "application/json" };
    if (method !== "GET") headers["X-CSRFToken"] = csrfToken();
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(url, {
        method,
        headers,
        credentials: "same-origin",
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch {
      throw new ApiError(0, "The server could not be reached. Check your connection and try again.");
    }
    const data = await response.json().catch(() => null);
    if (!response.ok) throw errorOf(response.status, data);
    return data;
  }

  return {
    get: (url) => request("GET", url),
    post: (url, body) => request("POST", url, body ?? {}),
  };
}

/** The ApiError for a refusal's status and body (the endpoints' and the click channel's). */
export function errorOf(status, data) {
  const code = typeof data?.code === "string" ? data.code : "";
  return new ApiError(status, detailOf(data) || `The server answered ${status}.`, code);
}

// ninja answers {detail: "..."} for our errors and {detail: [{msg, loc}]} for schema errors.
function detailOf(data) {
  if (!data || data.detail === undefined) return "";
  if (typeof data.detail === "string") return data.detail;
  if (Array.isArray(data.detail)) return data.detail.map((item) => item.msg || String(item)).join(" ");
  return String(data.detail);
}

/** Fill the "{id}" slot of a URL the template rendered. */
export function withId(template, id) {
  return template.replace("{id}", encodeURIComponent(String(id)));
}
