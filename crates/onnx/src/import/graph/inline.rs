//! Calls of model-local functions: their size once inlined (bounded before anything is
//! imported), and the inlining itself.

use super::*;

impl<'f> Importer<'f> {
    /// How many nodes `nodes` become once function calls are inlined, counting subgraphs'
    /// nodes (saturating); found before anything is imported, so that a call bomb costs nothing.
    /// A function reached again through its own body is recursion, an error.
    pub(super) fn inlined_size(&self, nodes: &'f [NodeProto], memo: &mut HashMap<(String, String), u64>, active: &mut Vec<(String, String)>) -> Result<u64, ImportError> {
        let mut total = 0u64;
        for np in nodes {
            let domain = match np.domain.as_deref().unwrap_or("") {
                "ai.onnx" => "",
                d => d,
            };
            let key = (domain.to_string(), np.op_type.clone().unwrap_or_default());
            let size = match self.functions.get(&key) {
                Some(f) => match memo.get(&key) {
                    Some(&n) => n,
                    None => {
                        if active.contains(&key) {
                            return Err(ImportError::Invalid {
                                location: format!("function \"{}\" (domain {:?})", bounded(&key.1), bounded(&key.0)),
                                reason: "calls itself, directly or through other functions".into(),
                            });
                        }
                        active.push(key.clone());
                        let n = self.inlined_size(&f.node, memo, active)?;
                        active.pop();
                        memo.insert(key, n);
                        n
                    }
                },
                None => {
                    let mut n = 1u64;
                    for a in &np.attribute {
                        for g in a.g.iter().chain(&a.graphs) {
                            n = n.saturating_add(self.inlined_size(&g.node, memo, active)?);
                        }
                    }
                    n
                }
            };
            total = total.saturating_add(size);
        }
        Ok(total)
    }

    /// Inlines a call of model-local function `f`: its body is imported in a scope of its own
    /// where the formal inputs name the actual ones, and the formal outputs then name the call's.
    pub(super) fn inline(
        &mut self,
        np: &'f NodeProto,
        f: &'f FunctionProto,
        scope: &mut Scope,
        ctx: &Context<'f>,
        region: &mut Region,
    ) -> Result<(), ImportError> {
        let location = node_location(np);
        self.calls += 1;
        let call_name = match np.name.as_deref() {
            Some(n) if !n.is_empty() => n.to_string(),
            _ => format!("call{}", self.calls),
        };
        let mut inner = Scope::default();
        inner.frames.push(HashMap::new());
        for (i, formal) in f.input.iter().enumerate() {
            let actual = match np.input.get(i).map(String::as_str) {
                None | Some("") => None,
                Some(name) => match scope.lookup(name) {
                    Some(v) => v,
                    None => {
                        return Err(ImportError::Invalid {
                            location,
                            reason: format!(
                                "input \"{}\" is not defined before this node",
                                name.escape_debug()
                            ),
                        });
                    }
                },
            };
            inner.bind(formal, actual);
        }
        let mut env: AttrEnv<'f> = HashMap::new();
        for a in &f.attribute_proto {
            env.insert(a.name.clone().unwrap_or_default(), a);
        }
        for a in &np.attribute {
            env.insert(a.name.clone().unwrap_or_default(), a);
        }
        let mut fn_opsets = ctx.opsets.clone();
        let fn_key = (f.domain.clone().unwrap_or_default(), f.name.clone().unwrap_or_default());
        let fn_key_name = fn_key.1.clone();
        fn_opsets.extend(opsets(&f.opset_import, &format!("function \"{}\"", bounded(&fn_key.1)))?);
        let inner_ctx = Context {
            opsets: fn_opsets,
            env: Some(env),
            prefix: format!("{}{call_name}/", ctx.prefix),
        };
        self.enter(Nest::Call(fn_key.0, fn_key.1), || location.clone())?;
        let body = f.node.iter().try_for_each(|n| self.node(n, &mut inner, &inner_ctx, region));
        self.nesting.pop();
        body.map_err(|e| e.within(&format!("{location} > function \"{}\"", bounded(&fn_key_name))))?;
        for (formal, actual) in f.output.iter().zip(&np.output) {
            if actual.is_empty() {
                continue;
            }
            match inner.lookup(formal) {
                Some(Some(v)) => {
                    self.g.values[v.index()].name = format!("{}{actual}", ctx.prefix);
                    scope.bind(actual, Some(v));
                }
                _ => {
                    return Err(ImportError::Invalid {
                        location,
                        reason: format!(
                            "function output \"{}\" is never defined",
                            formal.escape_debug()
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}
