//! The `define_calls!` macro: one table row per runtime routine expands to a struct with a
//! named field per operand, the [`Call`](super::Call) and [`RuntimeFn`](super::RuntimeFn)
//! enums, each routine's signature, and the generic operand accessors every walk over calls
//! uses. Rows live in `table.rs`.

/// The field type of an operand of kind `$kind`.
macro_rules! operand_type {
    (i64) => { $crate::ir::Expr };
    (f32) => { $crate::ir::Expr };
    ($access:ident $($elems:ident)?) => { $crate::call::Addr };
}

/// The [`OperandKind`](super::OperandKind) an operand of kind `$kind` has.
macro_rules! operand_kind {
    (i64) => { $crate::call::OperandKind::I64 };
    (f32) => { $crate::call::OperandKind::F32 };
    ($access:ident) => { operand_kind!($access f32) };
    (read $elems:ident) => { $crate::call::OperandKind::Addr($crate::call::Access::Read, operand_elems!($elems)) };
    (write $elems:ident) => { $crate::call::OperandKind::Addr($crate::call::Access::Write, operand_elems!($elems)) };
    (read_write $elems:ident) => { $crate::call::OperandKind::Addr($crate::call::Access::ReadWrite, operand_elems!($elems)) };
}

/// The [`Elems`](super::Elems) an address operand's buffer holds.
macro_rules! operand_elems {
    (f32) => { $crate::call::Elems::F32 };
    (bytes) => { $crate::call::Elems::Bytes };
    (int8) => { $crate::call::Elems::Int8 };
    (i32) => { $crate::call::Elems::I32 };
}

/// A field's doc line: its name and kind.
macro_rules! operand_doc {
    ($field:ident i64) => { concat!("`", stringify!($field), "`: an `i64` value.") };
    ($field:ident f32) => { concat!("`", stringify!($field), "`: an `f32` value.") };
    ($field:ident read bytes) => { concat!("`", stringify!($field), "`: an address the routine reads from (any whole-byte elements).") };
    ($field:ident write bytes) => { concat!("`", stringify!($field), "`: an address the routine writes to (any whole-byte elements).") };
    ($field:ident write int8) => { concat!("`", stringify!($field), "`: an `i8` or `u8` address the routine writes to.") };
    ($field:ident read int8) => { concat!("`", stringify!($field), "`: an `i8` or `u8` address the routine reads from.") };
    ($field:ident read i32) => { concat!("`", stringify!($field), "`: an `i32` address the routine reads from.") };
    ($field:ident write i32) => { concat!("`", stringify!($field), "`: an `i32` address the routine writes to.") };
    ($field:ident read) => { concat!("`", stringify!($field), "`: an `f32` address the routine reads from.") };
    ($field:ident write) => { concat!("`", stringify!($field), "`: an `f32` address the routine writes to.") };
    ($field:ident read_write) => { concat!("`", stringify!($field), "`: an `f32` address the routine reads and writes.") };
}

macro_rules! define_calls {
    ($(
        $(#[$doc:meta])*
        $name:ident $text:literal $symbol:literal {
            $($field:ident : $kind:ident $($elems:ident)?),* $(,)?
        }
    )*) => {
        $(
            $(#[$doc])*
            #[doc = ""]
            #[doc = concat!("Text form `loop.call ", $text, "(...)`; runtime symbol `", $symbol, "`.")]
            #[derive(Clone, Debug, PartialEq)]
            pub struct $name {
                $(
                    #[doc = operand_doc!($field $kind $($elems)?)]
                    pub $field: operand_type!($kind $($elems)?),
                )*
            }

            impl $name {
                /// The operands in the order the runtime symbol takes them.
                pub const SIGNATURE: &'static [$crate::call::OperandSpec] = &[
                    $($crate::call::OperandSpec { name: stringify!($field), kind: operand_kind!($kind $($elems)?) },)*
                ];

                fn operands(&self) -> Vec<$crate::call::Operand<'_>> {
                    vec![$($crate::call::Field::view(&self.$field)),*]
                }

                fn operands_mut(&mut self) -> Vec<$crate::call::OperandMut<'_>> {
                    vec![$($crate::call::Field::view_mut(&mut self.$field)),*]
                }

                fn into_operands(self) -> Vec<$crate::call::Arg> {
                    vec![$($crate::call::Field::into_arg(self.$field)),*]
                }

                fn from_operands(args: Vec<$crate::call::Arg>) -> Result<$name, String> {
                    if args.len() != Self::SIGNATURE.len() {
                        return Err($crate::call::arity($text, Self::SIGNATURE, args.len()));
                    }
                    let mut args = args.into_iter();
                    Ok($name { $($field: $crate::call::take(&mut args, $text, stringify!($field))?,)* })
                }
            }

            impl From<$name> for Call {
                fn from(c: $name) -> Call {
                    Call::$name(Box::new(c))
                }
            }
        )*

        /// A runtime call with its operands: one variant per routine of the table. The
        /// operands are boxed, so that a statement stays small.
        #[derive(Clone, Debug, PartialEq)]
        pub enum Call {
            $(
                #[doc = concat!("`loop.call ", $text, "`")]
                $name(Box<$name>),
            )*
        }

        /// The routine a [`Call`] calls, without operands.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum RuntimeFn {
            $(
                #[doc = concat!("`loop.call ", $text, "`: see [`", stringify!($name), "`](struct@", stringify!($name), ").")]
                $name,
            )*
        }

        impl RuntimeFn {
            /// Every routine, in table order.
            pub const ALL: &'static [RuntimeFn] = &[$(RuntimeFn::$name),*];

            /// The routine's name in the text form (`loop.call NAME(...)`).
            pub fn name(self) -> &'static str {
                match self {
                    $(RuntimeFn::$name => $text,)*
                }
            }

            /// The routine spelled `name` in the text form.
            pub fn from_name(name: &str) -> Option<RuntimeFn> {
                match name {
                    $($text => Some(RuntimeFn::$name),)*
                    _ => None,
                }
            }

            /// The `kiln_runtime` symbol generated code calls.
            pub fn symbol(self) -> &'static str {
                match self {
                    $(RuntimeFn::$name => $symbol,)*
                }
            }

            /// The operands, in the order the symbol takes them.
            pub fn signature(self) -> &'static [$crate::call::OperandSpec] {
                match self {
                    $(RuntimeFn::$name => $name::SIGNATURE,)*
                }
            }
        }

        impl Call {
            /// The routine called.
            pub fn kind(&self) -> RuntimeFn {
                match self {
                    $(Call::$name(_) => RuntimeFn::$name,)*
                }
            }

            /// The operands, in signature order (as [`RuntimeFn::signature`] names them).
            pub fn operands(&self) -> Vec<$crate::call::Operand<'_>> {
                match self {
                    $(Call::$name(c) => c.operands(),)*
                }
            }

            /// The operands, mutably, in signature order.
            pub fn operands_mut(&mut self) -> Vec<$crate::call::OperandMut<'_>> {
                match self {
                    $(Call::$name(c) => c.operands_mut(),)*
                }
            }

            /// The operands as untyped values, in signature order.
            pub fn into_operands(self) -> Vec<$crate::call::Arg> {
                match self {
                    $(Call::$name(c) => c.into_operands(),)*
                }
            }

            /// The call of `kind` with `args` in signature order; an error names the operand
            /// that is missing or of the wrong sort (an address for a value, or the reverse).
            /// Scalar types are the verifier's to check.
            pub fn from_operands(kind: RuntimeFn, args: Vec<$crate::call::Arg>) -> Result<Call, String> {
                match kind {
                    $(RuntimeFn::$name => $name::from_operands(args).map(Call::from),)*
                }
            }
        }
    };
}
