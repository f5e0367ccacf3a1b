//! Enums whose every variant has one fixed text (metric label values, wire
//! names): the variants and their texts written once, in one table, with
//! `ALL` (every value, in declaration order) and `as_str`. Before this, each
//! such enum hand-wrote its list and its `match` (six of them), and a new
//! variant could be missing from one.

/// `label_enum!(/// doc\n pub Name { Variant => "text", ... })`.
macro_rules! label_enum {
    ($(#[$m:meta])* $vis:vis $name:ident { $($(#[$vm:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
        $vis enum $name { $($(#[$vm])* $variant),+ }
        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The value's fixed text.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }
    };
}
pub(crate) use label_enum;

/// [`label_enum`] with two texts per variant: `pair_enum!(/// doc\n pub Name
/// { Variant => ("first", "second"), ... })` gives `ALL` and `pair`.
macro_rules! pair_enum {
    ($(#[$m:meta])* $vis:vis $name:ident { $($(#[$vm:meta])* $variant:ident => ($a:literal, $b:literal)),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
        $vis enum $name { $($(#[$vm])* $variant),+ }
        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// The value's two fixed texts.
            pub fn pair(self) -> (&'static str, &'static str) {
                match self { $($name::$variant => ($a, $b)),+ }
            }
        }
    };
}
pub(crate) use pair_enum;
