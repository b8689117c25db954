//! The one generator of stable refusal codes: [`crate::stable_codes!`].

/// Declares a closed set of refusal reasons with stable string codes: the enum (with the
/// attributes and doc comments given), `ALL` (every variant, in declaration order), `as_str`
/// (the code), `FromStr` (the code back; `Err(())` for any other string) and `Display` (the
/// code). The proxy's denial reasons (`airlock_policy::Reason`, kebab-case) and the git
/// API's (`airlock_wire::Reason`, snake_case) are both declared with it, so the two sets
/// cannot drift in shape; each keeps its own spelling, and a code is never renamed.
///
/// ```
/// airlock_channels::stable_codes! {
///     /// Why.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum Why {
///         /// Too big.
///         TooBig => "too-big",
///         Late => "late",
///     }
/// }
/// assert_eq!(Why::ALL, [Why::TooBig, Why::Late]);
/// assert_eq!(Why::Late.as_str(), "late");
/// assert_eq!("too-big".parse::<Why>(), Ok(Why::TooBig));
/// assert_eq!(Why::TooBig.to_string(), "too-big");
/// ```
#[macro_export]
macro_rules! stable_codes {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$doc:meta])* $variant:ident => $code:literal, )*
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$doc])* $variant, )*
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$(stringify!($variant)),*].len()] = [ $( $name::$variant, )* ];

            /// The stable code: an interface (logs, headers, tests); never renamed.
            #[must_use]
            pub const fn as_str(&self) -> &'static str {
                match self { $( $name::$variant => $code, )* }
            }
        }

        impl ::core::str::FromStr for $name {
            type Err = ();
            fn from_str(s: &str) -> ::core::result::Result<$name, ()> {
                match s { $( $code => Ok($name::$variant), )* _ => Err(()) }
            }
        }

        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
