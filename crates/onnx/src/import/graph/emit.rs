//! One default-domain node into the graph: inputs looked up, the op upgraded and its attributes
//! typed, regions imported, types inferred, shape computations folded; and `Constant`.

use super::*;

impl<'f> Importer<'f> {
    /// Imports one default-domain node: inputs looked up, the op upgraded to the newest form,
    /// regions imported, types inferred; shape computations fold to constants.
    pub(super) fn emit(&mut self, e: Emit<'_, 'f>, scope: &mut Scope, ctx: &Context<'f>, region: &mut Region) -> Result<(), ImportError> {
        let Emit { location, op_type, version, name: node_name, attrs: values, mut graphs, inputs: input_names, outputs: output_names } = e;
        let mut inputs = Vec::with_capacity(input_names.len());
        for name in input_names {
            if name.is_empty() {
                inputs.push(None);
                continue;
            }
            match scope.lookup(name) {
                Some(v) => inputs.push(v),
                None => {
                    return Err(ImportError::Invalid {
                        location,
                        reason: format!(
                            "input \"{}\" is not defined before this node",
                            name.escape_debug()
                        ),
                    });
                }
            }
        }
        let kind =
            upgrade::kind_of(op_type, &self.kinds).ok_or_else(|| ImportError::Unsupported {
                location: location.clone(),
                reason: format!("unknown operator {op_type}"),
            })?;
        let mut pending = Pending {
            kind,
            attrs: values,
            inputs,
            num_outputs: output_names.len(),
        };
        let input_types: Vec<Option<TensorType>> = pending
            .inputs
            .iter()
            .map(|i| i.map(|v| self.g.ty(v).clone()))
            .collect();
        let g = &mut self.g;
        let mut new_const = |t: Tensor| {
            let v = g.add_value(t.ty(), String::new(), ValueDef::Const(t));
            region.consts.push(v);
            v
        };
        upgrade::upgrade(op_type, version, &mut pending, &input_types, &mut new_const).map_err(
            |reason| ImportError::Unsupported {
                location: location.clone(),
                reason,
            },
        )?;

        let op = pending
            .kind
            .with_attrs(pending.attrs)
            .map_err(|e| ImportError::Invalid {
                location: location.clone(),
                reason: e.to_string(),
            })?;

        // Regions, in the order the op names them.
        let mut regions = Vec::new();
        for rname in pending.kind.region_names() {
            let Some(pos) = graphs.iter().position(|(n, _)| n == rname) else {
                return Err(ImportError::Invalid {
                    location,
                    reason: format!("missing graph attribute `{rname}`"),
                });
            };
            let (_, gp) = graphs.swap_remove(pos);
            let fallback = self.body_param_types(&op, &pending.inputs);
            let region = self.region(gp, scope, ctx, fallback.as_deref()).map_err(|e| e.within(&format!("{location} > {rname}")))?;
            regions.push(region);
        }
        if let Some((n, _)) = graphs.first() {
            return Err(ImportError::Invalid {
                location,
                reason: format!("unexpected graph attribute `{n}`"),
            });
        }

        let sigs: Vec<RegionSig> = regions
            .iter()
            .map(|r| RegionSig {
                params: r.params.iter().map(|&p| self.g.ty(p).clone()).collect(),
                results: r.results.iter().map(|&p| self.g.ty(p).clone()).collect(),
            })
            .collect();
        let mut assumed = Vec::new();
        let types = {
            let inputs: Vec<Option<InferInput<'_>>> = pending
                .inputs
                .iter()
                .map(|i| {
                    i.map(|v| InferInput {
                        ty: self.g.ty(v),
                        value: self.g.const_value(v),
                    })
                })
                .collect();
            let mut symbols = NodeSymbols { symbols: &mut self.symbols, assumed: &mut assumed };
            let r = infer_op(&op, &inputs, &sigs, output_names.len(), &mut symbols);
            r.map_err(|e| match e {
                // kiln compiles for static ranks; a rank that depends on input data is a limit of
                // kiln, not a fault of the model.
                InferError::NotStatic(_) => ImportError::Unsupported {
                    location: location.clone(),
                    reason: format!("shape depends on run-time data: {e}"),
                },
                _ => ImportError::Invalid {
                    location: location.clone(),
                    reason: e.to_string(),
                },
            })?
        };

        if let Some(folded) = kiln_eval::fold::fold_node(&self.g, &op, &pending.inputs, &types) {
            for (name, t) in output_names.iter().zip(folded) {
                if !name.is_empty() {
                    let v = self.add_const(region, t, format!("{}{name}", ctx.prefix));
                    scope.bind(name, Some(v));
                }
            }
            return Ok(());
        }
        let outputs = output_names
            .iter()
            .zip(types)
            .map(|(name, ty)| (!name.is_empty()).then(|| (ty, format!("{}{name}", ctx.prefix))))
            .collect();
        let node = self.g.add_node(op, node_name, pending.inputs, outputs, regions);
        region.nodes.push(node);
        self.g.assumptions.extend(assumed.into_iter().map(|what| Assumption { node, what }));
        for (name, out) in output_names.iter().zip(self.g.node(node).outputs.clone()) {
            if !name.is_empty() {
                scope.bind(name, out);
            }
        }
        Ok(())
    }

    /// Parameter types to fall back on for Loop and Scan bodies whose inputs leave them out:
    /// Loop bodies take (iteration, condition, carried values...), Scan bodies take (state
    /// values..., one slice of each scanned input).
    pub(super) fn body_param_types(&self, op: &Op, inputs: &[Option<ValueId>]) -> Option<Vec<TensorType>> {
        let ty = |v: &Option<ValueId>| v.map(|v| self.g.ty(v).clone());
        match op {
            Op::Loop(_) => {
                let mut types = vec![
                    TensorType::known(DType::I64, &[]),
                    TensorType::known(DType::Bool, &[]),
                ];
                for v in inputs.iter().skip(2) {
                    types.push(ty(v)?);
                }
                Some(types)
            }
            Op::Scan(s) => {
                let scanned = usize::try_from(s.num_scan_inputs).ok()?;
                let states = inputs.len().checked_sub(scanned)?;
                let mut types: Vec<TensorType> =
                    inputs[..states].iter().map(ty).collect::<Option<_>>()?;
                for (i, v) in inputs[states..].iter().enumerate() {
                    let mut t = ty(v)?;
                    let axis = s.scan_input_axes.get(i).copied().unwrap_or(0);
                    let axis = if axis < 0 {
                        axis + t.rank() as i64
                    } else {
                        axis
                    };
                    if axis < 0 || axis as usize >= t.rank() {
                        return None;
                    }
                    t.shape.remove(axis as usize);
                    types.push(t);
                }
                Some(types)
            }
            _ => None,
        }
    }

    pub(super) fn constant(
        &mut self,
        np: &NodeProto,
        attrs: Vec<(String, AttrValue)>,
        scope: &mut Scope,
        ctx: &Context<'f>,
        region: &mut Region,
        location: &str,
    ) -> Result<(), ImportError> {
        let invalid = |reason: &str| ImportError::Invalid {
            location: location.to_string(),
            reason: reason.to_string(),
        };
        let [(name, value)] = &attrs[..] else {
            return Err(invalid("Constant needs exactly one value attribute"));
        };
        let t = match (name.as_str(), value) {
            ("value", AttrValue::Tensor(t)) => t.clone(),
            ("value_float", AttrValue::Float(f)) => Tensor::from_f32s(&[], &[*f]),
            ("value_floats", AttrValue::Floats(f)) => Tensor::from_f32s(&[f.len() as u64], f),
            ("value_int", AttrValue::Int(i)) => Tensor::from_i64s(&[], &[*i]),
            ("value_ints", AttrValue::Ints(i)) => Tensor::from_i64s(&[i.len() as u64], i),
            ("value_string", AttrValue::Str(s)) => string_tensor(&[], std::slice::from_ref(s)),
            ("value_strings", AttrValue::Strs(s)) => string_tensor(&[s.len() as u64], s),
            ("sparse_value", _) => {
                return Err(ImportError::Unsupported {
                    location: location.to_string(),
                    reason: "sparse constants".into(),
                });
            }
            _ => {
                return Err(invalid(&format!(
                    "unexpected attribute `{name}` of kind {}",
                    value.kind()
                )));
            }
        };
        let Some(out) = np.output.first() else {
            return Err(invalid("Constant has no output"));
        };
        let v = self.add_const(region, t, format!("{}{out}", ctx.prefix));
        scope.bind(out, Some(v));
        Ok(())
    }
}

/// The import's symbols, and the broadcasts one node's inference assumed.
struct NodeSymbols<'a> {
    symbols: &'a mut Symbols,
    assumed: &'a mut Vec<Assumed>,
}

impl SymbolSource for NodeSymbols<'_> {
    fn fresh(&mut self) -> Dim {
        self.symbols.fresh("dyn")
    }

    fn assume(&mut self, what: Assumed) {
        self.assumed.push(what);
    }
}

fn string_tensor(shape: &[u64], s: &[String]) -> Tensor {
    Tensor {
        dtype: kiln_tir::DType::String,
        shape: shape.to_vec(),
        data: kiln_tir::TensorData::Strings(
            s.iter()
                .map(|x| bytes::Bytes::from(x.clone().into_bytes()))
                .collect(),
        ),
    }
}
