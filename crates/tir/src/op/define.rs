//! The `define_ops!` macro: one table row per op expands to a typed attribute struct, the
//! `Op`/`OpKind` enums and the generic attribute conversion used by the importer and the text
//! parser. Rows live in `table.rs`.

/// An attribute-conversion failure for one op.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttrError {
    /// A required attribute is absent.
    #[error("missing required attribute `{0}`")]
    Missing(&'static str),
    /// An attribute the op does not have.
    #[error("unknown attribute `{0}`")]
    Unknown(String),
    /// An attribute whose value does not fit the op's field.
    #[error("attribute `{attr}`: {reason}")]
    Invalid {
        /// Attribute name.
        attr: String,
        /// What is wrong.
        reason: String,
    },
}

macro_rules! field_default {
    () => {
        Default::default()
    };
    ($e:expr) => {
        $e
    };
}

macro_rules! field_required {
    () => {
        true
    };
    ($e:expr) => {
        false
    };
}

macro_rules! define_ops {
    ($(
        $(#[$doc:meta])*
        $name:ident $text:literal $([$($region:ident),*])? {
            $($field:ident : $ty:ty $(= $default:expr)?),* $(,)?
        }
    )*) => {
        $(
            $(#[$doc])*
            #[derive(Clone, Debug, PartialEq)]
            // Field names are ONNX attribute names, `transA` included.
            #[allow(missing_docs, non_snake_case)]
            pub struct $name {
                $(pub $field: $ty,)*
            }

            impl Default for $name {
                fn default() -> Self {
                    $name { $($field: field_default!($($default)?),)* }
                }
            }

            impl $name {
                /// Attributes that differ from their defaults, in table order.
                #[allow(unused_mut)]
                fn attrs(&self) -> Vec<(&'static str, AttrValue)> {
                    let mut out = Vec::new();
                    $(
                        let skip = false $(|| { let d: $ty = $default; self.$field == d })?;
                        if !skip {
                            if let Some(v) = Attr::to_value(&self.$field) {
                                out.push((stringify!($field), v));
                            }
                        }
                    )*
                    out
                }

                #[allow(unused_mut, unused_variables)]
                fn from_attrs(mut attrs: Vec<(String, AttrValue)>) -> Result<Self, AttrError> {
                    let mut op = $name::default();
                    $(
                        let mut seen = false;
                        if let Some(i) = attrs.iter().position(|(k, _)| k == stringify!($field)) {
                            let (_, v) = attrs.swap_remove(i);
                            op.$field = Attr::from_value(v).map_err(|reason| AttrError::Invalid {
                                attr: stringify!($field).to_string(),
                                reason,
                            })?;
                            seen = true;
                        }
                        let required = field_required!($($default)?);
                        if required && !seen {
                            return Err(AttrError::Missing(stringify!($field)));
                        }
                    )*
                    if let Some((k, _)) = attrs.into_iter().next() {
                        return Err(AttrError::Unknown(k));
                    }
                    Ok(op)
                }
            }
        )*

        /// A tensor-IR operation with its typed attributes.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Op {
            $(
                #[doc = concat!("`tensor.", $text, "`")]
                $name($name),
            )*
        }

        /// The kind of an [`Op`], without attributes.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum OpKind {
            $(
                #[doc = concat!("`tensor.", $text, "`")]
                $name,
            )*
        }

        impl OpKind {
            /// Every op kind, in table order.
            pub const ALL: &'static [OpKind] = &[$(OpKind::$name),*];

            /// The op's name in the text form, without the `tensor.` prefix.
            pub fn text_name(self) -> &'static str {
                match self {
                    $(OpKind::$name => $text,)*
                }
            }

            /// The variant's Rust identifier. By convention it is the ONNX op type, which the
            /// importer relies on; nothing past the importer uses it.
            pub fn ident(self) -> &'static str {
                match self {
                    $(OpKind::$name => stringify!($name),)*
                }
            }

            /// The kind spelled `name` in the text form.
            pub fn from_text_name(name: &str) -> Option<OpKind> {
                match name {
                    $($text => Some(OpKind::$name),)*
                    _ => None,
                }
            }

            /// Names of the nested regions a node of this kind carries, in order.
            pub fn region_names(self) -> &'static [&'static str] {
                match self {
                    $(OpKind::$name => &[$($(stringify!($region)),*)?],)*
                }
            }

            /// Builds the op from untyped attributes, checking names, types and required ones.
            pub fn with_attrs(self, attrs: Vec<(String, AttrValue)>) -> Result<Op, AttrError> {
                match self {
                    $(OpKind::$name => $name::from_attrs(attrs).map(Op::$name),)*
                }
            }

            /// The op with every attribute at its default (required ones zero-valued).
            pub fn default_op(self) -> Op {
                match self {
                    $(OpKind::$name => Op::$name($name::default()),)*
                }
            }
        }

        impl Op {
            /// The op's kind.
            pub fn kind(&self) -> OpKind {
                match self {
                    $(Op::$name(_) => OpKind::$name,)*
                }
            }

            /// Attributes that differ from their defaults, as untyped values in table order.
            pub fn attrs(&self) -> Vec<(&'static str, AttrValue)> {
                match self {
                    $(Op::$name(a) => a.attrs(),)*
                }
            }
        }
    };
}
