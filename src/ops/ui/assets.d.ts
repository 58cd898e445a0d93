// The operator's page's script and stylesheet, imported as text (`with { type: "text" }`)
// so that `bun build --compile` embeds them; the HTML is typed by bun-types.
declare module "*/ops-ui.js" {
  const text: string;
  export default text;
}
declare module "*/ops-ui.css" {
  const text: string;
  export default text;
}
