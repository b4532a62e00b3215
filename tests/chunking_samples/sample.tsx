import React from "react";

type Props = { name: string };

export function Greeting({ name }: Props) {
  return <h1>Hello, {name}</h1>;
}

export const Farewell = ({ name }: Props) => {
  return <p>Bye, {name}</p>;
};
