"""The session: its events, their fold into state, and the verbs over it."""
