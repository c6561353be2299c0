declare module "*.wgsl" {
  const source: string;
  export default source;
}
